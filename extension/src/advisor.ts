/**
 * The What if tab: the recorded ops re-modeled in each mode, on each chip and with each suggested NKI kernel
 * (predicted step time with its range, speedup, MFU, cost per 1M steps, how well it is known) and, per row, the
 * line that runs it for real with Copy, and (in JupyterLab, for a profile of a notebook `%%neuron` cell) "Insert &
 * run" / "Insert": a new cell below the profiled cell holding it with the row's change, selected, run or not. The
 * profiled cell itself is never changed. Lays out the summary's `what_if` block.
 */
import type { IProfileViewActions } from './mime';
import { el, fmtNs, fmtPct, fmtUsd, isNum } from './dom';
import { ICompare, IProfilePayload, IProfiledCell, IWhatIfRow } from './tokens';

function copyButton(line: string): HTMLElement {
  const button = el('button', { class: 'jp-mod-styled ns-CopyRun', text: 'Copy', attrs: { type: 'button', title: 'Copy this line' } });
  button.addEventListener('click', event => {
    event.stopPropagation();
    const done = () => (button.textContent = 'Copied');
    const failed = () => (button.textContent = 'Select the line to copy');
    if (navigator.clipboard?.writeText) {
      navigator.clipboard.writeText(line).then(done, failed);
    } else {
      failed();
    }
  });
  return button;
}

/** Why a row has no Insert buttons (the line and Copy stay). */
function noInsertReason(r: IWhatIfRow, profiled: IProfiledCell | null | undefined): string {
  if (!profiled) {
    return 'Insert needs a profile of a %%neuron cell in a notebook (this one came from the CLI, an imported trace or the Python API): copy the line';
  }
  return r.kernel
    ? 'which of the cell\'s models to swap the kernel into is not known: copy the line and put your model in it'
    : 'no variant cell for this row: copy the line';
}

/** "Insert & run" and "Insert": each asks the notebook for a new cell below the profiled one; a failure says why. */
function insertButtons(
  r: IWhatIfRow,
  profiled: IProfiledCell,
  insert: NonNullable<IProfileViewActions['insertVariant']>
): HTMLElement {
  const status = el('span', { class: 'ns-InsertStatus ns-Muted', attrs: { role: 'status' } });
  const make = (label: string, run: boolean, title: string) => {
    const b = el('button', {
      class: `jp-mod-styled ns-InsertRun${run ? ' ns-mod-run' : ''}`,
      text: label,
      attrs: { type: 'button', title, 'data-run': String(run) }
    }) as HTMLButtonElement;
    b.addEventListener('click', event => {
      event.stopPropagation();
      buttons.forEach(x => (x.disabled = true));
      status.textContent = run ? 'Running…' : '';
      status.classList.remove('ns-mod-error');
      void insert({ source: r.cell!, profiled, run }, b).then(why => {
        buttons.forEach(x => (x.disabled = false));
        status.textContent = why ?? (run ? 'Inserted below the profiled cell and run' : 'Inserted below the profiled cell');
        status.classList.toggle('ns-mod-error', why !== null);
      });
    });
    return b;
  };
  const buttons = [
    make('Insert & run', true, 'Insert this variant as a new cell below the profiled cell and run it, to compare the prediction with the run'),
    make('Insert', false, 'Insert this variant as a new cell below the profiled cell (not run)')
  ];
  return el('span', { class: 'ns-InsertButtons' }, ...buttons, status);
}

/** A row's Insert buttons, or null where there are none (the profile's own row, no extension, no cell). */
export function insertControls(
  r: IWhatIfRow,
  profiled: IProfiledCell | null | undefined,
  actions: IProfileViewActions
): HTMLElement | null {
  if (r.current || !actions.insertVariant || !profiled || !r.cell) {
    return null;
  }
  return insertButtons(r, profiled, actions.insertVariant);
}

/** A row's command, on one line (scrolls sideways when longer than the table is wide), or null. */
function runLine(r: IWhatIfRow): HTMLElement | null {
  if (!r.run) {
    return null;
  }
  return el(
    'div',
    { class: 'ns-RunLine' },
    el('code', { text: r.run, title: r.cell ?? r.run }),
    r.where && !r.current ? el('span', { class: 'ns-Muted', text: ` ${r.where}` }) : null,
    r.why_not && r.kind === 'mode' ? el('div', { class: 'ns-Muted', text: `not advised: ${r.why_not}` }) : null
  );
}

/** A row's buttons, in their own column: Copy, then Insert & run / Insert (or why there are none). */
function runButtons(r: IWhatIfRow, profiled: IProfiledCell | null | undefined, actions: IProfileViewActions): HTMLElement {
  const cell = el('td', { class: 'ns-RunButtons' });
  if (!r.run) {
    cell.textContent = '—';
    return cell;
  }
  cell.appendChild(copyButton(r.run));
  const insert = insertControls(r, profiled, actions);
  if (insert) {
    cell.appendChild(insert);
  } else if (!r.current && actions.insertVariant && profiled) {
    // the table's note says why a profile has no cells at all; a row of one that has says it here
    cell.appendChild(el('span', { class: 'ns-Muted ns-NoInsert', text: ' ⓘ', title: noInsertReason(r, profiled) }));
  }
  return cell;
}

/** A short label of how a row is known; the full reason is its title and a note under the table. */
function basisLabel(basis: string): string {
  if (basis.startsWith("the profile's own") || basis.startsWith('measured:')) {
    return 'this profile';
  }
  if (basis.startsWith('the measured step scaled')) {
    return 'scaled';
  }
  return basis.includes('approximate') ? 'approximate' : 'exact (model)';
}

/** The What if page, or null when the summary has no advisor block. */
export function whatIfSection(p: IProfilePayload, actions: IProfileViewActions = {}): HTMLElement | null {
  const w = p.what_if;
  if (!w) {
    return null;
  }
  if (!w.rows?.length) {
    return el('div', { class: 'ns-WhatIf' }, el('div', { class: 'ns-Muted', text: w.note ?? 'No variants.' }));
  }
  // the profile's own row, then the advice in the advisor's ranking, then the other rows by step time
  const rank = (r: IWhatIfRow) => (isNum(r.rank) ? r.rank : Infinity);
  const rows = [...w.rows].sort(
    (a, b) => Number(b.current) - Number(a.current) || rank(a) - rank(b) ||
      (a.step_time_ns ?? Infinity) - (b.step_time_ns ?? Infinity)
  );
  // the variant's name says its mode and chip ("adaptive on trn2"); the row carries them as data attributes
  const headers = ['Variant', 'Step time', 'Range', 'Speedup', 'MFU', 'Cost / 1M steps', 'How it is known'];
  // two rows per variant: its figures, then the command that runs it on a line of its own under them; the
  // buttons (Copy, Insert & run, Insert) span both rows in the last column
  const body: HTMLElement[] = [];
  for (const r of rows) {
    const figures = el(
      'tr',
      { class: 'ns-WhatIfFigures' },
      el('td', { class: 'ns-Variant', text: r.variant }),
      el('td', { class: 'ns-Num', text: fmtNs(r.step_time_ns) }),
      el('td', {
        class: 'ns-Range',
        // a line break only at the dash: each end keeps its number with its unit
        text: isNum(r.step_time_low_ns) && isNum(r.step_time_high_ns)
          ? `${fmtNs(r.step_time_low_ns).replace(' ', '\u00a0')} – ${fmtNs(r.step_time_high_ns).replace(' ', '\u00a0')}`
          : '—'
      }),
      ...[isNum(r.speedup) ? `${r.speedup.toFixed(2)}×` : '—', fmtPct(r.mfu), fmtUsd(r.cost_per_1m_steps_usd ?? (isNum(r.cost_per_1000_steps_usd) ? r.cost_per_1000_steps_usd * 1000 : null))].map(c =>
        el('td', { class: 'ns-Num', text: c })
      ),
      el('td', { class: 'ns-Known' }, el('span', { class: 'ns-Muted ns-Basis', text: basisLabel(r.basis), title: r.basis })),
      runButtons(r, w.cell, actions)
    );
    figures.querySelector('td.ns-RunButtons')?.setAttribute('rowspan', '2');
    figures.setAttribute('data-current', String(r.current));
    figures.setAttribute('data-step-ns', String(r.step_time_ns));
    figures.setAttribute('data-low-ns', String(r.step_time_low_ns ?? ''));
    figures.setAttribute('data-high-ns', String(r.step_time_high_ns ?? ''));
    figures.setAttribute('data-variant', r.variant);
    figures.setAttribute('data-mode', r.mode);
    figures.setAttribute('data-chip', r.chip);
    figures.classList.toggle('ns-mod-current', r.current);
    figures.classList.toggle('ns-mod-best', r.variant === w.best);
    const line = runLine(r);
    const run = el('tr', { class: 'ns-WhatIfRun', attrs: { 'data-run-of': r.variant } },
      el('td', { attrs: { colspan: String(headers.length) } }, line ?? el('span', { class: 'ns-Muted', text: 'no line runs this variant' })));
    run.classList.toggle('ns-mod-current', r.current);
    run.classList.toggle('ns-mod-best-run', r.variant === w.best);
    body.push(figures, run);
  }
  const t = el(
    'table',
    { class: 'ns-Table ns-WhatIfTable' },
    el('thead', {}, el('tr', {}, ...headers.map(h => el('th', { text: h })), el('th', { text: 'Run it' }))),
    el('tbody', {}, ...body)
  );
  const reasons = [...new Set(rows.filter(r => !r.current).map(r => r.basis))];
  return el(
    'div',
    { class: 'ns-WhatIf' },
    w.scope_note ? el('div', { class: 'ns-Muted ns-WhatIfScope', text: w.scope_note }) : null,
    t,
    el('ul', { class: 'ns-WhatIfBasis' }, ...reasons.map(b => el('li', { class: 'ns-Muted', text: `${basisLabel(b)}: ${b}` }))),
    actions.insertVariant && !w.cell
      ? el('div', { class: 'ns-Muted ns-NoInsertNote', text: `No Insert buttons: ${noInsertReason(rows[0], null)}.` })
      : null,
    el('div', {
      class: 'ns-Muted',
      text: "Each row but this profile's own re-models the recorded ops with the NeuronCore model; nothing was rerun. " +
        "The range is the step time with the model's unmeasured assumptions at their low and high values." +
        (actions.insertVariant && w.cell
          ? ' "Insert & run" adds the row\'s cell below the profiled cell and runs it (the new run diffs against this one); ' +
            '"Insert" only adds it. The profiled cell is not changed.'
          : '')
    })
  );
}

/** A compare block's prediction in one sentence (as neuron_studio/ui/breakdown_html.py `prediction_text`), or null. */
export function predictionText(c: ICompare | null | undefined): string | null {
  const p = c?.prediction;
  if (!p || !isNum(p.step_time_ns)) {
    return null;
  }
  const range = isNum(p.low_ns) && isNum(p.high_ns) ? `, range ${fmtNs(p.low_ns)}–${fmtNs(p.high_ns)}` : '';
  const verdict = p.within === true ? 'within the range' : p.within === false ? 'OUTSIDE the range' : 'no range stated';
  return (
    `predicted ${fmtNs(p.step_time_ns)} by run ${c!.run_id}'s What if (${p.variant}${range}); ` +
    `this run: ${fmtNs(p.measured_ns)}, ${verdict}` +
    (isNum(p.ratio) ? `, ${p.ratio.toFixed(2)}× the prediction` : '')
  );
}
