/**
 * The Memory tab: bytes live on the device by category over the profiled steps (stacked area, the peak
 * marked: click it to list what is live there), the forecast per chip and LNC, and the levers with their
 * modeled effect. Lays out the summary's `memory` block; computes nothing.
 */
import { el, fmtNs, isNum, nameCell, proseCell, table } from './dom';
import { IMemoryBlock, SourceRef } from './tokens';

/** Renders an op source as a link (the profile view's sourceLink, bound to its actions). */
export type SourceLinker = (source: SourceRef | undefined) => HTMLElement | string;

const SVG_NS = 'http://www.w3.org/2000/svg';

export const CATEGORY_LABELS: Record<string, string> = {
  parameter: 'parameters',
  gradient: 'gradients',
  optimizer_state: 'optimizer state',
  input: 'input batch',
  activation: 'activations (saved for backward)',
  temporary: 'temporaries',
  hbm_tensors: 'tensors',
  hbm_weights: 'weights',
  hbm_io: 'I/O',
  hbm_scratchpad: 'scratchpad and spill',
  hbm_instructions: 'instructions',
  hbm_collectives: 'collectives',
  hbm_dma_rings: 'DMA rings',
  hbm_profiler: 'profiler buffers',
  hbm_other: 'other'
};

/** Binary units, 3 significant digits (as the Python side's fmt_bytes). */
export function fmtBytes(n: number | null | undefined): string {
  if (!isNum(n)) {
    return '—';
  }
  const units: [string, number][] = [
    ['GiB', 2 ** 30],
    ['MiB', 2 ** 20],
    ['KiB', 2 ** 10]
  ];
  for (const [unit, div] of units) {
    if (Math.abs(n) >= div) {
      return `${Number((n / div).toPrecision(3))} ${unit}`;
    }
  }
  return `${Math.round(n)} B`;
}

const yesNo = (v: boolean | null | undefined): string => (v === null || v === undefined ? '—' : v ? 'yes' : 'no');

/** The stacked area of bytes per category; the peak marker calls `onPeak` when clicked. */
export function memoryAreaSvg(m: IMemoryBlock, onPeak: () => void): SVGSVGElement | null {
  const tl = m.timeline;
  if (!tl) {
    return null;
  }
  const total = Array.isArray(tl.total) ? tl.total : [];
  const cats = (m.categories ?? []).filter(c => Array.isArray(tl[c]));
  const n = total.length;
  if (!n || !cats.length) {
    return null;
  }
  const width = 720;
  const height = 200;
  const left = 64;
  const top = 8;
  const plotH = height - 34;
  const plotW = width - left - 8;
  const ymax = Math.max(1, ...total);
  const xs = total.map((_, i) => left + (plotW * i) / Math.max(n - 1, 1));
  const y = (v: number) => top + plotH - (plotH * v) / ymax;
  const mk = (tag: string, attrs: Record<string, string | number>) => {
    const node = document.createElementNS(SVG_NS, tag);
    Object.entries(attrs).forEach(([k, v]) => node.setAttribute(k, String(v)));
    return node;
  };
  const root = mk('svg', {
    class: 'ns-MemArea',
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': 'device memory by category over the profiled steps'
  }) as SVGSVGElement;
  let lower = new Array<number>(n).fill(0);
  for (const c of cats) {
    const values = tl[c] as number[];
    const upper = lower.map((lo, i) => lo + (isNum(values[i]) ? values[i] : 0));
    if (upper.some((u, i) => u > lower[i])) {
      const pts = xs.map((x, i) => `${x.toFixed(1)},${y(upper[i]).toFixed(1)}`);
      const back = xs.map((x, i) => `${x.toFixed(1)},${y(lower[i]).toFixed(1)}`).reverse();
      const poly = mk('polygon', { points: [...pts, ...back].join(' '), class: `ns-MemCat ns-MemCat-${c}` });
      const tip = mk('title', {});
      tip.textContent = CATEGORY_LABELS[c] ?? c;
      poly.appendChild(tip);
      root.appendChild(poly);
    }
    lower = upper;
  }
  for (const s of tl.step_starts ?? []) {
    if (s >= 0 && s < n) {
      root.appendChild(mk('line', { x1: xs[s], x2: xs[s], y1: top, y2: top + plotH, class: 'ns-MemStep' }));
    }
  }
  const pk = Math.min(Math.max(0, m.peak?.index ?? 0), n - 1);
  const peak = mk('g', { class: 'ns-MemPeak', role: 'button', tabindex: 0 });
  peak.appendChild(mk('line', { x1: xs[pk], x2: xs[pk], y1: top, y2: top + plotH, class: 'ns-MemPeak-line' }));
  peak.appendChild(mk('circle', { cx: xs[pk], cy: y(total[pk]), r: 6, class: 'ns-MemPeak-dot' }));
  const tip = mk('title', {});
  tip.textContent = `peak ${fmtBytes(m.peak_bytes)}: click to list what is live`;
  peak.appendChild(tip);
  peak.addEventListener('click', onPeak);
  peak.addEventListener('keydown', event => {
    if ((event as KeyboardEvent).key === 'Enter') {
      onPeak();
    }
  });
  root.appendChild(peak);
  const label = (x: number, yy: number, text: string) => {
    const t = mk('text', { x, y: yy, class: 'ns-Timeline-axis' });
    t.textContent = text;
    root.appendChild(t);
  };
  label(0, top + 10, fmtBytes(ymax));
  label(0, top + plotH, '0');
  const xs0 = Array.isArray(tl.x_ns) ? tl.x_ns : [];
  const span = xs0.length ? xs0[xs0.length - 1] - xs0[0] : null;
  label(left, height - 6, `${String(tl.x_label ?? '')} 0 … ${fmtNs(span)} · ${tl.events} allocations and frees`);
  return root;
}

/** A short token (a dtype, a shape like 8x128x1024): kept whole on one line (a narrow table puts the shape under
 * its dtype). */
const token = (text: unknown) => el('span', { class: 'ns-Token', text: String(text ?? '') });

/** An op name: as the other names, with room for "aten::" and a few letters of the op before its ellipsis. */
function opName(op: string): HTMLElement {
  const name = nameCell(op);
  name.classList.add('ns-MemOp');
  return name;
}

/** What is live at the peak; names (what, op, module) as the hot ops show them: one line, ellipsised, full tooltip. */
function liveTable(m: IMemoryBlock, link: SourceLinker): HTMLTableElement {
  const peak = m.peak_bytes || 1;
  return table(
    ['Bytes', 'Share', 'Category', 'What', 'Tensor', 'Op', 'Module', 'Source'],
    (m.live ?? []).map(r => [
      fmtBytes(r.nbytes),
      `${((100 * r.nbytes) / peak).toFixed(1)}%`,
      String(r.category ?? '').replace(/_/g, ' '),
      r.name ? nameCell(String(r.name)) : '',
      el('span', {}, token(r.dtype), ' ', token(r.shape)),
      r.op ? opName(String(r.op)) : '—',
      r.module ? nameCell(String(r.module)) : '—',
      link(r.source)
    ]),
    'ns-MemLiveTable'
  );
}

/** The whole Memory tab. */
export function memorySection(m: IMemoryBlock, link: SourceLinker): HTMLElement {
  const f = m.forecast;
  const more = (m.live_count ?? 0) - (m.live?.length ?? 0);
  const live = el(
    'div',
    { class: 'ns-MemLive', attrs: { hidden: '' } },
    el('h4', {
      text: `Live at the peak: ${fmtBytes(m.peak_bytes)} in ${m.live_count} storages${more > 0 ? ` (${more} smaller not shown)` : ''}`
    }),
    liveTable(m, link)
  );
  const showLive = () => {
    live.hidden = false;
    live.scrollIntoView?.({ block: 'nearest' });
  };
  const area = memoryAreaSvg(m, showLive);
  const where = m.peak
    ? `at ${m.peak.op ?? '?'} in ${m.peak.module || '(no module)'}${m.peak.phase && !(m.peak.module ?? '').includes(m.peak.phase) ? ` (${m.peak.phase})` : ''}`
    : '';
  const legend = el(
    'div',
    { class: 'ns-MemLegend' },
    ...(m.categories ?? []).map(c =>
      el(
        'span',
        { class: 'ns-MemLegend-item' },
        el('i', { class: `ns-MemSwatch ns-MemCat-${c}` }),
        `${CATEGORY_LABELS[c] ?? c} `,
        el('b', { text: fmtBytes(m.by_category?.[c] ?? 0) })
      )
    )
  );
  const chips = table(
    ['Chip', 'LNC', 'HBM per logical core', 'Headroom', 'Fits', 'Fits while profiling'],
    (f?.chips ?? []).map(c => [
      c.chip,
      String(c.lnc),
      fmtBytes(c.capacity_bytes),
      fmtBytes(c.headroom_bytes),
      yesNo(c.fits),
      yesNo(c.fits_while_profiling)
    ]),
    'ns-MemChips'
  );
  const levers = table(
    ['Lever (modeled)', 'Peak', 'Saves', `Fits ${f?.chip ?? ''} LNC=${f?.lnc ?? ''}`, 'How'],
    (f?.levers ?? []).map(lv => [
      proseCell(lv.title, lv.assumption),
      fmtBytes(lv.peak_bytes),
      fmtBytes(lv.saving_bytes),
      yesNo(lv.fits),
      proseCell(lv.how)
    ]),
    'ns-MemLevers'
  );
  const acts = table(
    ['Module', 'Activations / step', 'Live at the peak'],
    (m.activations ?? []).map(a => [nameCell(String(a.module)), fmtBytes(a.activation_bytes), fmtBytes(a.at_peak_bytes)]),
    'ns-MemActs'
  );
  const b = m.bounds;
  return el(
    'div',
    { class: 'ns-Memory' },
    el(
      'div',
      { class: `ns-MemLine${f && !f.fits ? ' ns-MemLine-short' : ''}` },
      el('b', { text: f?.summary_line ?? `peak ${fmtBytes(m.peak_bytes)}` }),
      ` ${where}`
    ),
    area
      ? el('div', { class: 'ns-MemAreaBox' }, area)
      : el('div', {
          class: 'ns-MemNoTimeline',
          text: m.measured
            ? 'Measured peak only: TorchNeuron records no per-allocation timeline. Profile the same step on the emulator for categories and levers.'
            : 'No memory timeline.'
        }),
    legend,
    live,
    el('h4', { text: 'Will it fit?' }),
    chips,
    el('h4', { text: 'Levers' }),
    levers,
    el('h4', { text: 'Activations per module' }),
    acts,
    b
      ? el('p', {
          class: 'ns-MemBounds',
          text: `Fragmentation-free lower bound ${fmtBytes(b.lower_bound_bytes)} vs allocator high-water mark ${fmtBytes(
            b.allocator_high_water_bytes
          )} (modeled: best fit, ${b.round_bytes}-byte blocks)`
        })
      : null,
    el('ul', { class: 'ns-MemNotes' }, ...[...(f?.assumptions ?? []), ...(m.notes ?? [])].map(t => el('li', { text: t })))
  );
}
