/**
 * The what-if advisor's Insert buttons in a notebook: find the cell a profile ran from, insert a row's cell right
 * below it (never touching the profiled cell), make it the active cell and, for "Insert & run", run it.
 * Every way this can fail returns the reason, which the button shows (with Copy still there).
 */
import type { Cell, CodeCell, ICodeCellModel } from '@jupyterlab/cells';
import { NotebookActions, NotebookPanel } from '@jupyterlab/notebook';

import { IProfiledCell } from './tokens';

/** A cell's text as compared: trailing spaces, leading/trailing blank lines and the magic line's spacing ignored. */
export function normalizedCell(text: string): string {
  const lines = text.split('\n').map(l => l.replace(/\s+$/, ''));
  while (lines.length && !lines[0]) {
    lines.shift();
  }
  while (lines.length && !lines[lines.length - 1]) {
    lines.pop();
  }
  if (lines[0]?.startsWith('%%')) {
    lines[0] = lines[0].split(/\s+/).join(' ');
  }
  return lines.join('\n');
}

/** True when two notebook paths name the same file (the kernel may know it relative to another directory). */
export function samePath(a: string | null | undefined, b: string | null | undefined): boolean {
  if (!a || !b) {
    return false;
  }
  const x = a.replace(/\\/g, '/');
  const y = b.replace(/\\/g, '/');
  return x === y || x.endsWith(`/${y}`) || y.endsWith(`/${x}`);
}

/** The profiled cell in `panel`, or why it is not there. `own` is the cell holding the clicked output, if any. */
export function findProfiledCell(
  panel: NotebookPanel,
  profiled: IProfiledCell,
  own: HTMLElement | null = null
): { cell: CodeCell } | { why: string } {
  const want = normalizedCell(profiled.source);
  const cells = panel.content.widgets.filter(c => c.model.type === 'code') as CodeCell[];
  const same = (c: CodeCell) => normalizedCell(c.model.sharedModel.getSource()) === want;
  const ownCell = own ? cells.find(c => c.node.contains(own)) : undefined;
  if (ownCell && same(ownCell)) {
    return { cell: ownCell };
  }
  const byId = profiled.id ? cells.find(c => c.model.id === profiled.id) : undefined;
  if (byId) {
    if (same(byId)) {
      return { cell: byId };
    }
    const n = (byId.model as ICodeCellModel).executionCount;
    return {
      why: `the profiled cell${n ? ` (In [${n}])` : ''} was edited after this run, so its variant would rerun old code: copy the line instead`
    };
  }
  const bySource = [...cells].reverse().find(same);
  if (bySource) {
    return { cell: bySource };
  }
  return { why: `no cell of ${panel.context.path} holds the profiled code (edited or deleted since the run): copy the line instead` };
}

/** Insert `source` as a new code cell right below `cell`, make it the active cell, and run it if asked. */
export async function insertBelow(panel: NotebookPanel, cell: Cell, source: string, run: boolean): Promise<Cell> {
  const notebook = panel.content;
  const model = notebook.model;
  if (!model) {
    throw new Error(`${panel.context.path} has no model`);
  }
  const index = notebook.widgets.indexOf(cell);
  if (index < 0) {
    throw new Error('the profiled cell is no longer in the notebook');
  }
  model.sharedModel.insertCell(index + 1, { cell_type: 'code', source, metadata: {} });
  const inserted = notebook.widgets[index + 1];
  notebook.mode = 'command';
  notebook.deselectAll();
  notebook.activeCellIndex = index + 1;
  await notebook.scrollToCell(inserted, 'center');
  if (run) {
    await NotebookActions.run(notebook, panel.sessionContext);
  }
  return inserted;
}
