/**
 * Notebook navigation for op sources (`cell-<In>:<line>`) and the status bar's scan of a notebook's
 * latest profile output.
 */
import type { CodeCell, ICodeCellModel } from '@jupyterlab/cells';
import type { NotebookPanel } from '@jupyterlab/notebook';

import { IProfilePayload, PROFILE_MIME } from './tokens';

/** The code cell whose execution count is `count` (the last one if several claim it). */
export function findCodeCell(panel: NotebookPanel, count: number): CodeCell | null {
  const cells = panel.content.widgets;
  for (let i = cells.length - 1; i >= 0; i--) {
    const cell = cells[i];
    if (cell.model.type === 'code' && (cell.model as ICodeCellModel).executionCount === count) {
      return cell as CodeCell;
    }
  }
  return null;
}

/** The body of a cell after a leading cell-magic line, trimmed (what the run store keeps as `cell_source`). */
function cellBody(text: string): string {
  const lines = text.split('\n');
  return (lines[0]?.startsWith('%%') ? lines.slice(1) : lines).join('\n').trim();
}

/**
 * The cell a `cell-<count>` source names. `own` is the cell the profile belongs to: the cell holding
 * the clicked output (`ownNode`) or, from the profiler panel, the cell whose body is the run's
 * `cell_source`. Under IPython >= 9 the runner numbers the running `%%neuron` cell one past its In
 * number (IPython increments `execution_count` before running a cell), so a source one past the own
 * cell's count that no cell has is the own cell: a profile cannot name a cell that ran after it.
 */
export function resolveSourceCell(
  panel: NotebookPanel,
  count: number,
  own: { node?: HTMLElement | null; cellSource?: string | null } = {}
): CodeCell | null {
  const exact = findCodeCell(panel, count);
  if (exact) {
    return exact;
  }
  const cells = panel.content.widgets.filter(c => c.model.type === 'code') as CodeCell[];
  let ownCell: CodeCell | undefined;
  if (own.node) {
    ownCell = cells.find(c => c.node.contains(own.node!));
  }
  if (!ownCell && own.cellSource) {
    const body = own.cellSource.trim();
    ownCell = [...cells].reverse().find(c => cellBody(c.model.sharedModel.getSource()) === body);
  }
  if (ownCell && (ownCell.model as ICodeCellModel).executionCount === count - 1) {
    return ownCell;
  }
  return null;
}

/**
 * The editor line (1-based) of line `line` of a source in `text`. In a cell that starts with a cell
 * magic (`%%neuron ...`) the runner compiles the body alone, so its lines start after the magic line.
 */
export function editorLine(text: string, line: number): number {
  const lines = text.split('\n');
  const offset = lines[0]?.startsWith('%%') ? 1 : 0;
  return Math.max(1, Math.min(line + offset, lines.length));
}

/** Make the cell active, scroll it into view and put the cursor at the start of the source line. */
export async function revealCellLine(
  panel: NotebookPanel,
  cell: CodeCell,
  line: number,
  source: string
): Promise<number> {
  const notebook = panel.content;
  const index = notebook.widgets.indexOf(cell);
  notebook.mode = 'command';
  notebook.activeCellIndex = index;
  notebook.deselectAll();
  await notebook.scrollToCell(cell, 'center');
  await cell.ready;
  const target = editorLine(cell.model.sharedModel.getSource(), line);
  panel.node.querySelectorAll('[data-neuron-source]').forEach(node => {
    node.removeAttribute('data-neuron-source');
    node.removeAttribute('data-neuron-line');
  });
  cell.node.dataset.neuronSource = source;
  cell.node.dataset.neuronLine = String(target);
  notebook.mode = 'edit';
  const editor = cell.editor;
  if (editor) {
    const position = { line: target - 1, column: 0 };
    editor.setCursorPosition(position);
    editor.revealPosition(position);
    editor.focus();
  }
  return target;
}

/** The profile payload of the most recently executed cell that displayed one, or null. */
export function latestProfile(panel: NotebookPanel): IProfilePayload | null {
  const model = panel.model;
  if (!model) {
    return null;
  }
  let best: IProfilePayload | null = null;
  let bestCount = -Infinity;
  for (const cell of model.cells) {
    if (cell.type !== 'code') {
      continue;
    }
    const outputs = (cell as ICodeCellModel).outputs;
    for (let i = 0; i < outputs.length; i++) {
      const data = outputs.get(i).data[PROFILE_MIME] as unknown as IProfilePayload | undefined;
      if (!data || typeof data !== 'object') {
        continue;
      }
      const count = (cell as ICodeCellModel).executionCount ?? 0;
      // the highest execution count wins; unexecuted or equal counts: the later one in the notebook
      if (count >= bestCount) {
        best = data;
        bestCount = count;
      }
    }
  }
  return best;
}
