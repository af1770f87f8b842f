/**
 * Where the step time goes, at the top of the profile view: the mean step as one stacked bar whose segments
 * add up to the step time, one bar per step, a legend (categories the data cannot tell say so), the
 * recommendations (each opens the tab holding the rows that justify it and marks them) and the best variant
 * the what-if advisor predicts (with its Insert buttons, as in the What if tab). Lays out the summary's `breakdown` and `what_if` blocks; computes nothing.
 */
import { insertControls } from './advisor';
import type { IProfileViewActions } from './mime';
import { el, fmtNs, fmtPct, isNum } from './dom';
import { IBreakdownBlock, IProfilePayload, IRecommendation } from './tokens';

export const BREAKDOWN_COLORS: Record<string, string> = {
  compute: '#4e79a7',
  collective: '#f28e2b',
  fallback: '#e15759',
  sync: '#b07aa1',
  transfer: '#9c755f',
  launch: '#bab0ac',
  idle: '#e8e8e8'
};

/** A recommendation's `tab` -> the label of the profile view's tab holding its rows. */
export const REC_TABS: Record<string, string> = {
  optable: 'Op table',
  hot: 'Hot path',
  fallbacks: 'Fallbacks & syncs',
  syncs: 'Fallbacks & syncs'
};

/** Opens a tab of the profile view and marks the rows of `ops` there (returns how many rows it marked). */
export type RowOpener = (tabLabel: string, ops: string[]) => number;

function stackedBar(parts: Record<string, number | null>, labels: Map<string, string>, stepNs: number, cls: string): HTMLElement {
  const barEl = el('div', { class: cls, attrs: { 'data-step-ns': String(stepNs) } });
  for (const [key, label] of labels) {
    const ns = parts[key];
    if (!isNum(ns) || ns <= 0 || stepNs <= 0) {
      continue;
    }
    const seg = el('div', {
      class: `ns-BreakdownSeg ns-BreakdownSeg-${key}`,
      title: `${label}: ${fmtNs(ns)} (${fmtPct(ns / stepNs)})`,
      attrs: { 'data-key': key, 'data-ns': String(ns) }
    });
    seg.style.width = `${Math.max(0, Math.min(100, (ns / stepNs) * 100)).toFixed(3)}%`;
    seg.style.background = BREAKDOWN_COLORS[key] ?? '#888';
    barEl.appendChild(seg);
  }
  return barEl;
}

function recommendation(r: IRecommendation, openRows: RowOpener): HTMLElement {
  const tab = REC_TABS[r.tab] ?? 'Op table';
  const status = el('span', { class: 'ns-RecStatus' });
  const link = el('a', {
    class: 'ns-RecLink',
    text: `(see the ${tab} rows)`,
    attrs: { href: '#', 'data-tab': tab, 'data-ops': JSON.stringify(r.ops ?? []) }
  });
  link.addEventListener('click', event => {
    event.preventDefault();
    event.stopPropagation();
    const n = openRows(tab, r.ops ?? []);
    status.textContent = n ? '' : ' (its rows are not among the rows listed there)';
  });
  return el('div', { class: 'ns-Rec', attrs: { 'data-category': r.category } }, `→ ${r.text} `, link, status);
}

function bestVariant(p: IProfilePayload, actions: IProfileViewActions): HTMLElement | null {
  const w = p.what_if;
  const rows = w?.rows ?? [];
  const best = rows.find(r => r.variant === w?.best);
  const cur = rows.find(r => r.current);
  if (!best || !cur || !isNum(best.step_time_ns) || !isNum(cur.step_time_ns) || best.step_time_ns >= cur.step_time_ns) {
    return null;
  }
  const approx = best.basis.includes('approximate') ? ', approximate' : '';
  return el(
    'div',
    { class: 'ns-Rec ns-BestVariant' },
    'What if: ',
    el('b', { text: best.variant }),
    ` is predicted at ${fmtNs(best.step_time_ns)} per step (${(cur.step_time_ns / best.step_time_ns).toFixed(1)}× faster${approx}); run it with `,
    el('code', { text: best.run ?? '' }),
    ' (What if tab)',
    insertControls(best, w?.cell, actions)
  );
}

/** The breakdown section, or null when the summary has none. */
export function breakdownSection(
  p: IProfilePayload,
  openRows: RowOpener,
  actions: IProfileViewActions = {}
): HTMLElement | null {
  const b: IBreakdownBlock | null | undefined = p.breakdown;
  if (!b || !Array.isArray(b.parts)) {
    return null;
  }
  const head = el(
    'div',
    { class: 'ns-BreakdownHead' },
    el('b', { text: 'Where the step time goes' }),
    el('span', { class: 'ns-Muted', text: ` ${b.basis}${isNum(b.step_time_ns) ? ` · ${fmtNs(b.step_time_ns)} per step` : ''}` })
  );
  if (!isNum(b.step_time_ns)) {
    return el('div', { class: 'ns-Breakdown' }, head, el('div', { class: 'ns-Warn', text: `Not available: ${(b.notes ?? []).join(' ')}` }));
  }
  const labels = new Map(b.parts.map(x => [x.key, x.label] as [string, string]));
  const mean: Record<string, number | null> = {};
  b.parts.forEach(x => (mean[x.key] = x.ns));
  const legend = el('div', { class: 'ns-BreakdownLegend' });
  const undetermined: HTMLElement[] = [];
  for (const x of b.parts) {
    if (!x.determined) {
      legend.appendChild(el('span', { class: 'ns-Undetermined', text: `${x.label}: not determined`, title: x.note ?? '' }));
      undetermined.push(el('div', { class: 'ns-Muted', text: `${x.label}: ${x.note ?? 'not determined'}` }));
    } else if (isNum(x.ns) && x.ns > 0) {
      const sw = el('i', {});
      sw.style.background = BREAKDOWN_COLORS[x.key] ?? '#888';
      legend.appendChild(el('span', { attrs: { 'data-key': x.key } }, sw, `${x.label} ${fmtNs(x.ns)} (${fmtPct(x.share)})`));
    }
  }
  const steps = (b.steps ?? []).length > 1
    ? el(
        'div',
        { class: 'ns-BreakdownSteps' },
        ...b.steps.map(st =>
          el(
            'div',
            { class: 'ns-BreakdownStep' },
            el('span', { class: 'ns-Muted', text: `step ${st.step}` }),
            stackedBar(st.parts, labels, isNum(st.step_ns) ? st.step_ns : 0, 'ns-BreakdownBar ns-BreakdownBar-step'),
            el('span', { class: 'ns-Muted', text: fmtNs(st.step_ns) })
          )
        )
      )
    : null;
  return el(
    'div',
    { class: 'ns-Breakdown' },
    head,
    stackedBar(mean, labels, b.step_time_ns, 'ns-BreakdownBar ns-BreakdownBar-mean'),
    legend,
    ...undetermined,
    steps,
    ...(b.notes ?? []).map(n => el('div', { class: 'ns-Muted', text: n })),
    ...(b.recommendations ?? []).map(r => recommendation(r, openRows)),
    bestVariant(p, actions)
  );
}
