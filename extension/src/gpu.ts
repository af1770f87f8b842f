/**
 * GPU views of an imported CUDA/ROCm trace: the measured temporal and kernel breakdowns, and the same job
 * modeled on Trainium (per op and per step, what the port would hit, cost per 1M steps on both).
 * Lays out `payload.gpu`; computes nothing.
 */
import { Child, el, fmtNs, fmtPct, fmtUsd, table } from './dom';
import { IGpuBlock, IGpuVsTrainium, IProfilePayload, ITemporalBreakdown } from './tokens';

const KINDS: [string, string][] = [
  ['compute', 'ns-GpuCompute'],
  ['communication', 'ns-GpuComm'],
  ['memory', 'ns-GpuMemory'],
  ['idle', 'ns-GpuIdle']
];

/** "file · rank 0 of 2 · NVIDIA A100" for an imported trace, else "". */
export function sourceLine(p: IProfilePayload): string {
  const src = p.source;
  if (!src) {
    return '';
  }
  const parts = [String(src.file ?? 'trace')];
  if (src.rank !== null && src.rank !== undefined) {
    parts.push(`rank ${src.rank} of ${src.world_size ?? '?'}`);
  }
  if (src.device) {
    parts.push(String(src.device));
  }
  return parts.join(' · ');
}

function share(t: ITemporalBreakdown, kind: string): number {
  const v = (t as unknown as Record<string, number>)[`${kind}_share`];
  return typeof v === 'number' && Number.isFinite(v) ? v : 0;
}

function ns(t: ITemporalBreakdown, kind: string): number | null {
  const v = (t as unknown as Record<string, number>)[`${kind}_ns`];
  return typeof v === 'number' ? v : null;
}

export function temporalBar(t: ITemporalBreakdown, kind = 'GPU'): HTMLElement {
  const strip = el(
    'div',
    { class: 'ns-GpuStrip' },
    ...KINDS.map(([k, cls]) => {
      const seg = el('div', { class: `ns-GpuSeg ${cls}`, title: `${k} ${fmtPct(share(t, k))}` });
      seg.style.width = `${(100 * share(t, k)).toFixed(2)}%`;
      return seg;
    })
  );
  const legend = el(
    'div',
    { class: 'ns-Muted' },
    KINDS.map(([k]) => `${k} ${fmtNs(ns(t, k))} (${fmtPct(share(t, k))})`).join(' · ') +
      ` — over ${fmtNs(t.span_ns)} of ${kind} span (measured)`
  );
  return el('div', { class: 'ns-GpuTemporal' }, strip, legend);
}

/** What recorded the trace's device activity, as named in it ("GPU", "MTIA", ...). */
function kindOf(g: IGpuBlock): string {
  return g.device_kind ?? 'GPU';
}

function measuredSection(g: IGpuBlock): HTMLElement {
  const kind = kindOf(g);
  return el(
    'div',
    { class: 'ns-GpuSection' },
    el('h4', { text: 'Temporal breakdown' }),
    temporalBar(g.temporal, kind),
    el('div', {
      class: 'ns-Muted',
      text: `${g.activities} ${kind} activities, ${fmtNs(g.total_ns)} in total; ${fmtNs(g.unattributed_ns)} with no recorded launching op`
    }),
    el('h4', { text: 'Kernels' }),
    table(
      ['Kernel', 'Kind', 'Count', 'Total', 'Mean', 'Share'],
      g.kernels.map(k => [k.name.slice(0, 140), k.kind, String(k.count), fmtNs(k.total_ns), fmtNs(k.mean_ns), fmtPct(k.share)]),
      'ns-Kernels'
    )
  );
}

function metric(label: string, value: string): HTMLElement {
  return el('div', { class: 'ns-Metric' }, el('div', { class: 'ns-Metric-value', text: value }), el('div', { class: 'ns-Metric-label', text: label }));
}

export function vsTrainiumSection(v: IGpuVsTrainium): HTMLElement {
  const kind = v.device_kind ?? 'GPU';
  const gpu = v.gpu ?? kind;
  const parts: Child[] = [
    el(
      'div',
      { class: 'ns-Metrics' },
      metric(`${gpu} step (measured)`, fmtNs(v.gpu_step_ns)),
      metric(`${kind} busy/step (measured)`, fmtNs(v.gpu_busy_ns)),
      metric(`${v.chip} step (modeled)`, v.trainium_step_ns === null ? 'not modeled' : fmtNs(v.trainium_step_ns)),
      metric(`${kind} / 1M steps`, fmtUsd(v.gpu_per_1m_steps_usd)),
      metric(`${v.chip} / 1M steps (modeled)`, fmtUsd(v.trainium_per_1m_steps_usd))
    ),
    table(
      ['Op', 'Calls/step', `${gpu} /step`, `${v.chip} /step (modeled)`, 'Ratio', 'Shapes', 'Port'],
      v.ops.map(o => [
        o.op,
        o.calls_per_step.toPrecision(3),
        fmtNs(o.gpu_ns),
        fmtNs(o.trainium_ns),
        o.ratio === null ? '–' : `${o.ratio.toFixed(2)}×`,
        fmtPct(o.shapes_recorded),
        o.port
      ]),
      'ns-GpuVsTrainium'
    )
  ];
  if (v.port_issues.length) {
    parts.push(
      el('h4', { text: 'What the port would hit' }),
      table(
        ['Op', 'Calls', 'Reason', 'Why', `${kind} time/step`],
        v.port_issues.map(i => [i.op, String(i.count), i.reason, i.why, fmtNs(i.gpu_ns)]),
        'ns-PortIssues'
      )
    );
  } else {
    parts.push(el('p', { class: 'ns-Muted', text: 'No op in this trace is listed as a CPU fallback or an op without a Neuron lowering.' }));
  }
  parts.push(
    el('div', {
      class: 'ns-Muted',
      text: `prices: ${kind} ${fmtUsd(v.gpu_price_per_hour_usd)}/h (${v.gpu_price_source}); ${v.chip} ${fmtUsd(v.trainium_price_per_hour_usd)}/h`
    }),
    ...v.notes.map(n => el('div', { class: 'ns-Muted', text: n }))
  );
  return el('div', { class: 'ns-GpuSection' }, ...parts);
}

/** Tabs for the profile view: "GPU (measured)" and "GPU → Trainium" when the payload has a GPU block. */
export function gpuPages(p: IProfilePayload): [string, HTMLElement][] {
  const g = p.gpu;
  if (!g) {
    return [];
  }
  const kind = kindOf(g);
  const pages: [string, HTMLElement][] = [[`${kind} (measured)`, measuredSection(g)]];
  if (g.vs_trainium) {
    pages.push([`${kind} → Trainium`, vsTrainiumSection(g.vs_trainium)]);
  }
  return pages;
}
