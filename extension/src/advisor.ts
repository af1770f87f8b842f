/**
 * The What if tab: the recorded ops re-modeled in each mode, on each chip and with each suggested NKI kernel
 * (predicted step time with its range, speedup, MFU, cost per 1,000 steps, how well it is known) and the
 * one line that runs a variant for real, with a button copying it. Lays out the summary's `what_if` block.
 */
import { el, fmtNs, fmtPct, fmtUsd, isNum, table } from './dom';
import { IProfilePayload, IWhatIfRow } from './tokens';

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

function runCell(r: IWhatIfRow): HTMLElement | string {
  if (!r.run) {
    return '—';
  }
  return el('span', { class: 'ns-RunLine' }, el('code', { text: r.run }), ' ', copyButton(r.run));
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
export function whatIfSection(p: IProfilePayload): HTMLElement | null {
  const w = p.what_if;
  if (!w) {
    return null;
  }
  if (!w.rows?.length) {
    return el('div', { class: 'ns-WhatIf' }, el('div', { class: 'ns-Muted', text: w.note ?? 'No variants.' }));
  }
  const rows = [...w.rows].sort(
    (a, b) => Number(b.current) - Number(a.current) || (a.step_time_ns ?? Infinity) - (b.step_time_ns ?? Infinity)
  );
  const t = table(
    ['Variant', 'Mode', 'Chip', 'Step time', 'Range', 'Speedup', 'MFU', 'Cost / 1k steps', 'Run it', 'How it is known'],
    rows.map(r => [
      r.variant,
      r.mode,
      r.chip,
      fmtNs(r.step_time_ns),
      isNum(r.step_time_low_ns) && isNum(r.step_time_high_ns) ? `${fmtNs(r.step_time_low_ns)} – ${fmtNs(r.step_time_high_ns)}` : '—',
      isNum(r.speedup) ? `${r.speedup.toFixed(2)}×` : '—',
      fmtPct(r.mfu),
      fmtUsd(r.cost_per_1000_steps_usd),
      runCell(r),
      el('span', { class: 'ns-Muted ns-Basis', text: basisLabel(r.basis), title: r.basis })
    ]),
    'ns-WhatIfTable'
  );
  t.querySelectorAll('tbody tr').forEach((tr, i) => {
    const r = rows[i];
    tr.setAttribute('data-current', String(r.current));
    tr.setAttribute('data-step-ns', String(r.step_time_ns));
    tr.setAttribute('data-variant', r.variant);
    tr.classList.toggle('ns-mod-current', r.current);
    tr.classList.toggle('ns-mod-best', r.variant === w.best);
  });
  const reasons = [...new Set(rows.filter(r => !r.current).map(r => r.basis))];
  return el(
    'div',
    { class: 'ns-WhatIf' },
    t,
    el('ul', { class: 'ns-WhatIfBasis' }, ...reasons.map(b => el('li', { class: 'ns-Muted', text: `${basisLabel(b)}: ${b}` }))),
    el('div', {
      class: 'ns-Muted',
      text: "Each row but this profile's own re-models the recorded ops with the NeuronCore model; nothing was rerun. " +
        "The range is the step time with the model's unmeasured assumptions at their low and high values."
    })
  );
}
