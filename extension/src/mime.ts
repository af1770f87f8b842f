/**
 * The renderer of `application/vnd.neuron-studio.profile+json`: a pure function of the payload,
 * written with DOM APIs and `textContent` only (data never reaches innerHTML).
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import {
  ENGINES,
  IHotOp,
  IKernelRef,
  INeuronStatusModel,
  IOpRow,
  IRecompile,
  IRegionSplit,
  IProfilePayload,
  ISyncPlace,
  ISyncPlaces,
  IVariantRequest,
  PROFILE_MIME,
  SourceRef
} from './tokens';

import {
  Child,
  bar,
  el,
  fmtCount,
  fmtNs,
  fmtPct,
  fmtSignedPct,
  fmtUsd,
  isNum,
  nameCell,
  table
} from './dom';
import { predictionText, whatIfSection } from './advisor';
import { breakdownSection } from './breakdown';
import { gpuPages, sourceLine } from './gpu';
import { fmtBytes, memorySection } from './memory';
import { traceTab } from './viewer/tab';

export { bar, el, fmtCount, fmtNs, fmtPct, fmtSignedPct, fmtUsd, table };

function metric(label: string, value: string, note?: string): HTMLElement {
  return el(
    'div',
    { class: 'ns-Metric' },
    el('div', { class: 'ns-Metric-value', text: value }),
    el('div', { class: 'ns-Metric-label', text: label }),
    note ? el('div', { class: 'ns-Metric-note', text: note }) : null
  );
}

// ---- the profile view ---------------------------------------------------------------------------

export interface IProfileViewActions {
  /** Open a kernel source at a line (the `neuron-studio:open-kernel` command). */
  openKernel?: (kernel: IKernelRef) => void;
  /** Open the Neuron Profiler panel on this run. */
  openProfiler?: (runId: number | null) => void;
  /**
   * Jump to an op's source (the `neuron-studio:open-source` command): `origin` is the clicked element
   * (its notebook panel holds the cell), `notebookPath` the notebook when the view is not in one.
   */
  openSource?: (
    source: string,
    origin: HTMLElement | null,
    notebookPath?: string | null,
    cellSource?: string | null
  ) => void;
  /**
   * Insert a what-if row's cell below the profiled cell (`neuron-studio:insert-variant`), and run it if asked;
   * resolves to null when done, else to why not. `notebookPath`: the run's notebook when the view is not in one.
   */
  insertVariant?: (request: IVariantRequest, origin: HTMLElement | null, notebookPath?: string | null) => Promise<string | null>;
  /** The path of the notebook an output element belongs to (the trace viewer asks the server for its run). */
  notebookPathOf?: (node: HTMLElement) => string | null;
}

/** A parsed op source: a notebook cell by execution count, or a file; both with a 1-based line. */
export type ParsedSource =
  | { kind: 'cell'; count: number; line: number }
  | { kind: 'file'; file: string; line: number };

const CELL_SOURCE = /^cell-(\d+):(\d+)$/;
const FILE_SOURCE = /^([^<>\n]+?):(\d+)$/;

export function parseSource(source: SourceRef | undefined): ParsedSource | null {
  if (typeof source !== 'string' || !source) {
    return null;
  }
  const cell = CELL_SOURCE.exec(source);
  if (cell) {
    return { kind: 'cell', count: Number(cell[1]), line: Math.max(1, Number(cell[2])) };
  }
  const file = FILE_SOURCE.exec(source);
  if (file && !file[1].startsWith('cell-')) {
    return { kind: 'file', file: file[1], line: Math.max(1, Number(file[2])) };
  }
  return null;
}

/** A short label: `cell [N] line L` or `file.py:L`; anything unparsed verbatim. */
export function sourceLabel(source: SourceRef | undefined): string {
  const parsed = parseSource(source);
  if (!parsed) {
    return String(source ?? '');
  }
  if (parsed.kind === 'cell') {
    return `cell [${parsed.count}] line ${parsed.line}`;
  }
  return `${parsed.file.split(/[\\/]/).pop()}:${parsed.line}`;
}

/** The source of an op as a link that jumps to the cell line or opens the file at the line. */
export function sourceLink(source: SourceRef | undefined, actions: IProfileViewActions): HTMLElement | string {
  const parsed = parseSource(source);
  if (!parsed || !actions.openSource) {
    return source ? el('span', { class: 'ns-Source', text: sourceLabel(source), title: String(source) }) : '—';
  }
  const link = el('a', {
    class: `ns-SourceLink ns-SourceLink-${parsed.kind}`,
    text: sourceLabel(source),
    title: parsed.kind === 'cell' ? `In [${parsed.count}], line ${parsed.line} (${source})` : String(source),
    attrs: { href: '#', 'data-source': String(source) }
  });
  link.addEventListener('click', event => {
    event.preventDefault();
    event.stopPropagation();
    actions.openSource?.(String(source), link);
  });
  return link;
}

export function kernelLink(kernel: IKernelRef, actions: IProfileViewActions): HTMLElement {
  const where = kernel.file ? `${kernel.file}${isNum(kernel.line) ? `:${kernel.line}` : ''}` : 'no source file';
  const label = `${kernel.name ?? String(kernel.file ?? 'kernel').split(/[\\/]/).pop()} (${kernel.kind ?? 'kernel'})`;
  const saving = isNum(kernel.saving_ns) && kernel.saving_ns > 0 ? `saves ~${fmtNs(kernel.saving_ns)}/step` : '';
  const title = [where, saving, kernel.scope ? `replaces: ${kernel.scope}` : ''].filter(Boolean).join(' · ');
  if (!kernel.file) {
    return el('span', { class: 'ns-KernelRef', text: label, title });
  }
  const link = el('a', {
    class: 'ns-KernelLink',
    text: label,
    title,
    attrs: {
      href: '#',
      'data-file': String(kernel.file),
      'data-line': String(isNum(kernel.line) ? kernel.line : 1)
    }
  });
  link.addEventListener('click', event => {
    event.preventDefault();
    event.stopPropagation();
    actions.openKernel?.(kernel);
  });
  return el(
    'span',
    { class: 'ns-KernelCell' },
    link,
    saving ? el('span', { class: 'ns-KernelSaving', text: ` ${saving}` }) : null
  );
}

/** Per million steps from a stored summary that has only the per-1,000 figure. */
function perMillion(x: number | null | undefined): number | null {
  return isNum(x) ? x * 1000 : null;
}

/** A hot op's fix: the PyTorch change that rewrites it first (with its predicted speedup), then its NKI kernel with
 * the modeled saving against the time it replaces (or "saving not modeled"). */
function hotFix(op: IHotOp, actions: IProfileViewActions): HTMLElement | string {
  const change = (op as unknown as { change?: { variant?: string; speedup?: number | null } }).change;
  const k = op.kernel as (IKernelRef & { replaces_ns?: number | null; modeled?: boolean }) | null | undefined;
  if (!change?.variant && !k) {
    return '—';
  }
  const parts: Child[] = [];
  if (change?.variant) {
    parts.push(el('div', { class: 'ns-HotChange', text: `first: ${change.variant}${isNum(change.speedup) ? `, ${change.speedup.toFixed(1)}×` : ''} (What if)` }));
  }
  if (k) {
    const scope = String(k.scope ?? 'op');
    const note = k.kind !== 'candidate'
      ? ''
      : k.modeled === false || !isNum(k.saving_ns)
        ? 'saving not modeled'
        : `saves ~${fmtNs(k.saving_ns)}/step` + (isNum(k.replaces_ns)
          ? ` of ${scope.startsWith('module') ? `the module's ${fmtNs(k.replaces_ns)} (${scope})` : `this op's ${fmtNs(k.replaces_ns)}`}`
          : '') + ' (modeled)';
    // the note says the saving against what it replaces: the link does not say it again
    parts.push(el('div', {}, kernelLink({ ...k, saving_ns: note ? null : k.saving_ns }, actions), note ? el('span', { class: 'ns-Muted', text: ` ${note}` }) : null));
  }
  return el('span', { class: 'ns-HotFix' }, ...parts);
}

/**
 * What the hot ops' time column holds: modeled device time, device time measured on Trainium, or, for an imported
 * trace recorded without shapes, the measured GPU/host time it is ranked by (as the inline table says).
 */
export function hotTimeLabel(p: { modeled?: boolean | null; hot_basis?: string | null }): string {
  if (p.hot_basis && !p.hot_basis.startsWith('modeled')) {
    const what = p.hot_basis.split(' ')[1] ?? 'device';
    return `${what[0].toUpperCase()}${what.slice(1)} time/step (measured)`;
  }
  return `Device time/step (${p.modeled === false ? 'measured' : 'modeled'})`;
}

export function hotOpsTable(ops: IHotOp[], actions: IProfileViewActions, timeLabel = 'Device time/step (modeled)'): HTMLElement {
  return el('div', { class: 'ns-HotOpsBox' }, hotOpsRows(ops, actions, timeLabel));
}

function hotOpsRows(ops: IHotOp[], actions: IProfileViewActions, timeLabel: string): HTMLTableElement {
  return table(
    ['Op', 'Module', 'Source', timeLabel, 'Share', 'Bound', 'Change / NKI kernel'],
    ops.map(op => [
      nameCell(String(op.op), op.why ? String(op.why) : undefined),
      op.module ? nameCell(String(op.module)) : '—',
      sourceLink(op.source, actions),
      fmtNs(op.device_ns),
      fmtPct(op.share),
      el('span', { class: `ns-Bound ns-Bound-${String(op.bound)}`, text: String(op.bound ?? '') }),
      hotFix(op, actions)
    ]),
    'ns-HotOps'
  );
}

/** The summary's sync places. A payload from before version 2 (a saved notebook output, a stored run) lists each
 * occurrence instead: read here as places, counted per step over its `steps` (as profile_summary.current_summary
 * reads it in Python); it kept no sync times, so none is shown. */
export function syncPlaces(p: IProfilePayload): ISyncPlaces | null {
  if (p.sync_places) {
    return p.sync_places;
  }
  if (!Array.isArray(p.sync_points)) {
    return null;
  }
  const steps = Math.max(1, isNum(p.steps) ? p.steps : 1);
  const rows = new Map<string, ISyncPlace>();
  for (const s of p.sync_points) {
    const key = JSON.stringify([s.source ?? null, s.op, s.reason]);
    const row = rows.get(key) ?? { op: s.op, reason: s.reason, source: s.source ?? null, modules: [], count: 0, time_ns: null };
    row.count = (row.count ?? 0) + 1;
    if (s.module && !row.modules.includes(s.module)) {
      row.modules.push(s.module);
    }
    rows.set(key, row);
  }
  const places = [...rows.values()].map(r => ({ ...r, count: (r.count ?? 0) / steps }));
  return { places, total: places.length, left_out: 0, left_out_count: 0, time_basis: null };
}

/** A large count in 3 significant digits with an SI suffix ("1.07 G"): the op table's FLOPs and bytes fit. */
export function fmtCompact(x: number | null | undefined): string {
  if (!isNum(x)) {
    return '—';
  }
  const a = Math.abs(x);
  for (const [v, unit] of [[1e15, 'P'], [1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']] as [number, string][]) {
    if (a >= v) {
      return `${(x / v).toPrecision(3)} ${unit}`;
    }
  }
  return String(Math.round(x));
}

/**
 * The op table. `basis` says what it ranks by: modeled device time, or, for an imported trace whose ops were
 * recorded without shapes, measured GPU/host time; then only measured columns are shown (the model could not
 * size those ops) and a note says so.
 */
export function opTable(rows: IOpRow[], basis?: string | null, splits?: IRegionSplit[], modeled = true): HTMLElement {
  if (basis && !basis.startsWith('modeled')) {
    const what = basis.replace(/^measured /, '');
    return el(
      'div',
      { class: 'ns-OpTableBox' },
      el('div', {
        class: 'ns-Muted ns-OpTableBasis',
        text: `Ranked by ${basis}: this trace's ops were recorded without input shapes, so there is no modeled device time to show.`
      }),
      table(
        ['Op', 'Count/step', `${what[0].toUpperCase()}${what.slice(1)}/step (measured)`, 'Share', 'Host time/step (measured)'],
        rows.map(r => [String(r.op), fmtCount(r.count), fmtNs(r.measured_ns), fmtPct(r.share), fmtNs(r.host_ns)]),
        'ns-OpTable'
      )
    );
  }
  const ends = rows.some(r => (r.region_splits ?? 0) > 0);
  const body = table(
    ['Op', 'Count/step', `Device time/step (${modeled ? 'modeled' : 'measured'})`, 'Host time/step (measured)', 'Share', 'Engine', 'Bound', 'FLOPs/step', 'Bytes/step',
      ...(ends ? ['Ends regions/step'] : [])],
    rows.map(r => [
      String(r.op),
      fmtCount(r.count),
      fmtNs(r.device_ns),
      fmtNs(r.host_ns),
      fmtPct(r.share),
      String(r.engine ?? ''),
      String(r.bound ?? ''),
      fmtCompact(r.flops),
      fmtCompact(r.bytes),
      ...(ends ? [r.region_splits ? fmtCount(r.region_splits) : ''] : [])
    ]),
    'ns-OpTable'
  );
  if (!splits?.length) {
    return body;
  }
  // where the user's code ends launch regions (the trace's launch-region lane marks them), with the fix
  return el(
    'div',
    { class: 'ns-OpTableBox' },
    body,
    el(
      'div',
      { class: 'ns-RegionSplits' },
      el('b', { text: 'Where your code ends launch regions' }),
      el('span', { text: ' (each ends the region before it and launches on its own; the trace marks them):' }),
      el(
        'ul',
        {},
        ...splits.map(d =>
          el('li', { text: `${d.op}${d.source ? ` at ${d.source}` : ''}, ${fmtCount(d.per_step)} per step: ${d.fix}` })
        )
      )
    )
  );
}

function header(p: IProfilePayload): HTMLElement {
  const title = p.name ? `${p.name}` : 'Neuron profile';
  return el(
    'div',
    { class: 'ns-Header' },
    el('span', { class: 'ns-Title', text: title }),
    p.run_id !== null && p.run_id !== undefined
      ? el('span', { class: 'ns-RunId', text: `run #${p.run_id}` })
      : p.backend === 'imported'
        ? el('span', { class: 'ns-RunId', text: 'imported trace' })
        : null,
    p.source ? el('span', { class: 'ns-TraceSource', text: sourceLine(p) }) : null,
    el('span', { class: 'ns-Tag', text: `mode: ${p.mode}` }),
    el('span', { class: 'ns-Tag', text: `chip: ${p.chip}` }),
    el('span', { class: 'ns-Tag', text: `backend: ${p.backend}` }),
    p.modeled
      ? el('span', {
          class: 'ns-Tag ns-Modeled',
          text: 'modeled',
          title: `device figures come from the performance model, not a measurement. ${p.calibration_note ?? p.calibration?.text ?? ''}`.trim()
        })
      : null,
    p.status && p.status !== 'ok'
      ? el('span', { class: `ns-Tag ns-Status-${p.status}`, text: p.status })
      : null
  );
}

function badges(p: IProfilePayload): HTMLElement | null {
  const b = p.badges;
  if (!b) {
    return null;
  }
  const one = (n: number, label: string, kind: string) =>
    el('span', {
      class: `ns-Badge ns-Badge-${kind}${n > 0 ? ' ns-Badge-active' : ''}`,
      text: `${n} ${label}`
    });
  return el(
    'div',
    { class: 'ns-Badges' },
    one(b.fallbacks ?? 0, 'CPU fallbacks', 'fallbacks'),
    one(b.sync_points ?? 0, 'sync points', 'syncs'),
    one(b.recompiles ?? 0, 'recompiles', 'recompiles')
  );
}

/** "range 1.2 ms – 3.4 ms (launch cost ...)" when the step time rests on unmeasured assumptions. */
function stepRange(p: IProfilePayload): string | undefined {
  const r = p.step_time_range_ns;
  if (!p.modeled || !r || !isNum(r[0]) || !isNum(r[1]) || r[1] <= r[0]) {
    return undefined;
  }
  const drivers = Object.values(p.range_drivers ?? {});
  return `range ${fmtNs(r[0])} – ${fmtNs(r[1])}` + (drivers.length ? ` (${drivers.join('; ')})` : '');
}

function summarySection(p: IProfilePayload, actions: IProfileViewActions): HTMLElement {
  const compare = p.compare;
  const metrics = el(
    'div',
    { class: 'ns-Metrics' },
    // an imported trace the model could not size (no shapes): its measured step, said so, not a modeled "—"
    !isNum(p.step_time_ns) && isNum(p.breakdown?.step_time_ns) && p.breakdown!.basis.startsWith('measured')
      ? metric(`step time (${p.breakdown!.basis})`, fmtNs(p.breakdown!.step_time_ns))
      : null,
    metric(
      p.modeled ? 'step time (modeled)' : 'step time',
      fmtNs(p.step_time_ns),
      compare
        ? `${fmtSignedPct(compare.step_time_delta_pct)} vs run #${compare.run_id}` +
          (compare.prediction
            ? ` · predicted ${fmtNs(compare.prediction.step_time_ns)} (${
                compare.prediction.within === false ? 'outside its range' : compare.prediction.within ? 'within its range' : 'no range'
              })`
            : '')
        : stepRange(p)
    ),
    metric(p.modeled ? 'MFU (modeled)' : 'MFU', fmtPct(p.mfu)),
    metric(p.modeled ? 'MBU (modeled)' : 'MBU', fmtPct(p.mbu)),
    isNum(p.host_time_ns) ? metric('host time', fmtNs(p.host_time_ns)) : null,
    isNum(p.launches) ? metric('launches/step', fmtCount(p.launches)) : null,
    isNum(p.steps) ? metric('steps', String(p.steps)) : null,
    p.memory ? metric('peak memory', fmtBytes(p.memory.peak_bytes), p.memory.forecast?.summary_line) : null
  );
  const engines = el('div', { class: 'ns-Engines' }, el('h4', { text: p.modeled ? 'Engine utilization (modeled)' : 'Engine utilization' }));
  const byName = new Map((p.engines ?? []).map(e => [e.engine, e]));
  const names = [...ENGINES, ...[...byName.keys()].filter(n => !(ENGINES as readonly string[]).includes(n))];
  for (const name of names) {
    const e = byName.get(name);
    if (e) {
      engines.appendChild(bar(name, e.utilization, fmtNs(e.busy_ns)));
    }
  }
  const cost = p.cost
    ? el(
        'div',
        { class: 'ns-Cost' },
        el('h4', { text: `Cost per 1M steps${p.cost.modeled === false ? '' : ' (modeled)'}` }),
        el('div', {
          text: `${p.cost.chip}: ${fmtUsd(p.cost.per_1m_steps_usd ?? perMillion(p.cost.per_1000_steps_usd))} at ${fmtUsd(p.cost.price_per_hour_usd)}/h`
        }),
        el('div', {
          text: `H100: ${fmtUsd(p.cost.h100_per_1m_steps_usd ?? perMillion(p.cost.h100_per_1000_steps_usd))} at ${fmtUsd(p.cost.h100_price_per_hour_usd)}/h`
        })
      )
    : null;
  const hot = p.hot_ops?.length
    ? el('div', {}, el('h4', { text: 'Hot ops' }), hotOpsTable(p.hot_ops.slice(0, 5), actions, hotTimeLabel(p)))
    : null;
  return el('div', { class: 'ns-Summary' }, metrics, engines, cost, hot);
}

/** Each reason once, with the hot ops it applies to (one sentence per bound, not one per row). */
function whyOnce(ops: IHotOp[]): HTMLElement[] {
  const byWhy = new Map<string, string[]>();
  for (const o of ops) {
    if (o.why) {
      const names = byWhy.get(o.why) ?? [];
      if (!names.includes(String(o.op))) {
        names.push(String(o.op));
      }
      byWhy.set(o.why, names);
    }
  }
  return [...byWhy].map(([why, names]) => el('li', {}, el('b', { text: names.join(', ') }), `: ${why}`));
}

function hotPathSection(p: IProfilePayload, actions: IProfileViewActions): HTMLElement {
  const ops = p.hot_ops ?? [];
  const basis = p.hot_basis && !p.hot_basis.startsWith('modeled') ? `Ranked by ${p.hot_basis}.` : '';
  return el(
    'div',
    {},
    basis ? el('div', { class: 'ns-Muted', text: basis }) : null,
    hotOpsTable(ops, actions, hotTimeLabel(p)),
    el('ul', { class: 'ns-Why' }, ...whyOnce(ops))
  );
}

/** Per-rank table, straggler and slowest collective of a multi-rank run. */
export function ranksSection(p: IProfilePayload): HTMLElement {
  const ra = p.ranks_analysis;
  const parts: Child[] = [];
  if (!ra) {
    return el('div', {});
  }
  const gpuRanks = ra.ranks.some(r => r.gpu_compute_share !== null && r.gpu_compute_share !== undefined);
  // per step over the steps every rank recorded; when those are unknown (or an older run), totals, said so
  const perStep = ra.steps?.per_step ?? null;
  const unit = perStep ? '/step' : ' (total)';
  parts.push(
    table(
      ['Rank', 'Step (host)', 'Step (modeled)', 'MFU', `Collectives${unit}`, `Waited${unit}`, 'Overlap'].concat(
        gpuRanks ? ['GPU compute', 'GPU comm', 'GPU memory', 'GPU idle'] : []
      ),
      ra.ranks.map(r =>
        [
          String(r.rank),
          fmtNs(r.step_time_ns),
          fmtNs(r.modeled_step_time_ns),
          fmtPct(r.mfu),
          perStep ? fmtCount(r.collectives_per_step) : String(r.collectives ?? '–'),
          fmtNs(perStep ? r.wait_per_step_ns : r.wait_ns),
          fmtPct(r.overlap_share)
        ].concat(
          gpuRanks
            ? [
                fmtPct(r.gpu_compute_share),
                fmtPct(r.gpu_communication_share),
                fmtPct(r.gpu_memory_share),
                fmtPct(r.gpu_idle_share)
              ]
            : []
        )
      ),
      'ns-Ranks'
    )
  );
  const st = ra.straggler;
  const rule = ra.straggler_rule;
  let waited = '';
  if (st) {
    waited =
      st.wait_per_step_ns !== null && st.wait_per_step_ns !== undefined
        ? `${fmtNs(st.wait_per_step_ns)} per step (over ${st.steps} steps)`
        : `${fmtNs(st.caused_wait_ns)} in total over the ` +
          (st.steps === null ? 'capture (its steps are unknown)' : 'profiled steps');
  }
  let none = 'No straggler: no rank makes the others wait noticeably.';
  if (rule) {
    none = rule.steps
      ? `No straggler: no rank makes the others wait at least ${fmtNs(rule.min_wait_per_step_ns)} per step ` +
        `(over ${rule.steps} steps) and ${fmtPct(rule.min_wait_share)} of their compute before those collectives.`
      : `No straggler: no rank makes the others wait ${fmtPct(rule.min_wait_share)} of their compute before ` +
        `those collectives (the steps are unknown: the per-step floor of ${fmtNs(rule.min_wait_per_step_ns)} ` +
        'was not applied).';
  }
  parts.push(
    el('p', {
      class: 'ns-Straggler',
      text: st
        ? `Straggler: rank ${st.rank} — the other ranks wait ${waited} in ${st.op}` +
          (st.op_before ? ` (last op before it: ${st.op_before})` : '')
        : none
    })
  );
  const sc = ra.slowest_collective;
  if (sc) {
    parts.push(
      el('p', {
        text: `Slowest collective: ${sc.op} #${sc.index} (${sc.bytes} bytes) spans ${fmtNs(sc.span_ns)}; last rank ${sc.last_rank}`
      })
    );
  }
  // what the figures leave out or could not put per step (unknown steps, ranks missing, steps not on every rank)
  for (const n of ra.notes ?? []) {
    parts.push(el('div', { class: 'ns-Muted ns-RanksNote', text: n }));
  }
  return el('div', { class: 'ns-RanksSection' }, ...parts);
}

function fallbacksSection(p: IProfilePayload, actions: IProfileViewActions): HTMLElement {
  const parts: Child[] = [];
  if (p.fallbacks?.length) {
    parts.push(
      el('h4', { text: 'CPU fallbacks' }),
      table(
        ['Op', 'Count/step', 'Reason', 'Device time/step'],
        p.fallbacks.map(f => [String(f.op), fmtCount(f.count), String(f.reason), fmtNs(f.time_ns)])
      )
    );
  }
  const sync = syncPlaces(p);
  if (sync?.places.length) {
    const basis = sync.time_basis;
    parts.push(
      el('h4', { text: 'Sync points' }),
      table(
        ['Op', 'Reason', 'Source', 'Module', 'Count/step', ...(basis ? [`Host time/step (${basis})`] : [])],
        sync.places.map(s => [
          String(s.op),
          String(s.reason),
          sourceLink(s.source, actions),
          s.modules.join(', '),
          fmtCount(s.count),
          ...(basis ? [fmtNs(s.time_ns)] : [])
        ]),
        'ns-SyncPoints'
      )
    );
    if (sync.left_out) {
      parts.push(
        el('p', {
          class: 'ns-Muted ns-SyncLeftOut',
          text: `${sync.left_out} more place${sync.left_out === 1 ? '' : 's'} not listed (${fmtCount(sync.left_out_count)} syncs/step); the ${sync.places.length} costliest are shown.`
        })
      );
    }
    if (!basis) {
      parts.push(
        el('p', {
          class: 'ns-Muted',
          text: 'Host time per step not determined (no modeled or measured time for these calls in this summary).'
        })
      );
    }
  }
  if (p.recompiles?.length) {
    parts.push(
      el('h4', { text: 'Recompiles' }),
      table(
        ['Graph', 'Shape', 'Reason'],
        p.recompiles.map(r => [String(r.graph), String(r.shape), recompileReason(r)]),
        'ns-Recompiles'
      )
    );
  }
  return el('div', {}, ...parts);
}

/** A recompile's reason in words, with Dynamo's own guard failures (as text) folded beneath it. */
function recompileReason(r: IRecompile): HTMLElement {
  return el(
    'div',
    { class: 'ns-RecompileReason', attrs: { 'data-cause': String(r.cause ?? '') } },
    el('span', { text: String(r.reason) }),
    r.detail
      ? el(
          'details',
          {},
          el('summary', { text: "Dynamo's guard failures" }),
          el('pre', { text: String(r.detail) })
        )
      : null
  );
}

function diffSection(p: IProfilePayload): HTMLElement {
  const c = p.compare!;
  const head = `vs run #${c.run_id}${c.name ? ` ${c.name}` : ''}: step time ${fmtNs(c.step_time_before_ns)} → ${fmtNs(
    c.step_time_after_ns
  )} (${fmtSignedPct(c.step_time_delta_pct)})`;
  return el(
    'div',
    { class: 'ns-Diff' },
    el('div', { text: head }),
    predictionText(c) ? el('div', { class: 'ns-Prediction', text: predictionText(c)! }) : null,
    table(
      ['Op', 'Before', 'After', 'Δ', ''],
      (c.ops ?? []).map(o => [
        String(o.op),
        fmtNs(o.before_ns),
        fmtNs(o.after_ns),
        `${o.delta_ns > 0 ? '+' : ''}${fmtNs(o.delta_ns)}`,
        String(o.status ?? '')
      ]),
      'ns-DiffOps'
    )
  );
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/** The summary's binned engine utilization as heat strips (no server round trip). */
/** Binned per-engine utilization as SVG rows: one row per engine, one rect per busy bin. */
export function engineBinsSvg(
  tracks: [string, number[]][],
  binLabel: (i: number) => string,
  axisText: string,
  rowH = 16,
  cls = 'ns-Timeline'
): SVGSVGElement {
  const labelW = 60;
  const width = 720;
  const bins = Math.max(1, ...tracks.map(([, v]) => v.length));
  const binW = (width - labelW) / bins;
  const height = tracks.length * rowH + 16;
  const mk = (tag: string, attrs: Record<string, string | number>) => {
    const n = document.createElementNS(SVG_NS, tag);
    Object.entries(attrs).forEach(([k, v]) => n.setAttribute(k, String(v)));
    return n;
  };
  const root = mk('svg', { class: cls, width, height, viewBox: `0 0 ${width} ${height}`, role: 'img' }) as SVGSVGElement;
  tracks.forEach(([name, values], row) => {
    const label = mk('text', { x: 0, y: row * rowH + 12, class: 'ns-Timeline-label' });
    label.textContent = name;
    root.appendChild(label);
    values.forEach((u, i) => {
      if (!isNum(u) || u <= 0) {
        return;
      }
      const rect = mk('rect', {
        x: labelW + i * binW,
        y: row * rowH + 2,
        width: Math.max(binW, 0.5),
        height: rowH - 4,
        class: `ns-Timeline-bin ns-Engine-${name}`,
        'fill-opacity': Math.max(0.08, Math.min(1, u)).toFixed(3)
      });
      const tip = mk('title', {});
      tip.textContent = `${name}: ${fmtPct(u)} at ${binLabel(i)}`;
      rect.appendChild(tip);
      root.appendChild(rect);
    });
  });
  const axis = mk('text', { x: labelW, y: tracks.length * rowH + 13, class: 'ns-Timeline-axis' });
  axis.textContent = axisText;
  root.appendChild(axis);
  return root;
}

export function summaryTimelineSvg(tl: NonNullable<IProfilePayload['timeline']>): SVGSVGElement | null {
  const starts = Array.isArray(tl.start_ns) ? tl.start_ns : [];
  const names = [...ENGINES, ...Object.keys(tl).filter(k => k !== 'start_ns' && k !== 'end_ns' && !(ENGINES as readonly string[]).includes(k))]
    .filter(e => Array.isArray(tl[e]));
  if (!starts.length || !names.length) {
    return null;
  }
  const ends = Array.isArray(tl.end_ns) ? tl.end_ns : [];
  return engineBinsSvg(
    names.map(n => [n, tl[n] as number[]]),
    i => fmtNs((starts[i] ?? 0) - starts[0]),
    `0 … ${fmtNs((ends[ends.length - 1] ?? starts[starts.length - 1]) - starts[0])}`,
    16,
    'ns-Timeline ns-SummaryTimeline'
  );
}

/** Tabs: a bar of buttons and one visible page. */
export function tabs(pages: [string, HTMLElement][]): HTMLElement {
  const bar = el('div', { class: 'ns-TabBar', attrs: { role: 'tablist' } });
  const body = el('div', { class: 'ns-TabBody' });
  const buttons: HTMLButtonElement[] = [];
  pages.forEach(([label, page], i) => {
    const button = el('button', {
      class: 'ns-Tab',
      text: label,
      attrs: { role: 'tab', 'data-tab': label, type: 'button' }
    });
    page.classList.add('ns-TabPage');
    page.setAttribute('data-tab', label);
    const select = () => {
      buttons.forEach(b => b.classList.toggle('ns-mod-active', b === button));
      body.replaceChildren(page);
    };
    button.addEventListener('click', select);
    buttons.push(button);
    bar.appendChild(button);
    if (i === 0) {
      select();
    }
  });
  return el('div', { class: 'ns-Tabs' }, bar, body);
}

/** The whole profile view: header, badges, tabs built from the data present. */
export function renderProfile(p: IProfilePayload, actions: IProfileViewActions = {}): HTMLElement {
  const pages: [string, HTMLElement][] = [['Summary', summarySection(p, actions)]];
  if (p.ranks_analysis?.ranks?.length) {
    pages.push([`Ranks (${p.ranks_analysis.ranks.length})`, ranksSection(p)]);
  }
  pages.push(...gpuPages(p));
  if (p.hot_ops?.length) {
    pages.push(['Hot path', hotPathSection(p, actions)]);
  }
  if (p.op_table?.length) {
    pages.push(['Op table', opTable(p.op_table, p.op_table_basis, p.region_splits, p.modeled !== false)]);
  }
  if (p.fallbacks?.length || syncPlaces(p)?.places.length || p.recompiles?.length) {
    pages.push(['Fallbacks & syncs', fallbacksSection(p, actions)]);
  }
  const trace = traceTab(p, actions, src => sourceLink(src, actions), name => {
    const hot = p.hot_ops?.find(h => h.op === name && h.kernel);
    return hot?.kernel ? kernelLink(hot.kernel, actions) : null;
  });
  const timeline = trace ? null : p.timeline ? summaryTimelineSvg(p.timeline) : null;
  if (trace) {
    pages.push(['Timeline', trace]);
  } else if (timeline) {
    pages.push(['Timeline', el('div', { class: 'ns-TimelineBox' }, timeline)]);
  } else if (p.timeline_note) {
    pages.push(['Timeline', el('div', { class: 'ns-TimelineBox ns-Muted ns-TimelineNote', text: p.timeline_note })]);
  }
  const whatIf = whatIfSection(p, actions);
  if (whatIf) {
    pages.push(['What if', whatIf]);
  }
  if (p.memory) {
    pages.push(['Memory', memorySection(p.memory, src => sourceLink(src, actions))]);
  }
  if (p.compare?.ops?.length) {
    pages.push(['Diff', diffSection(p)]);
  }
  // offered where there is a panel to open and this view is not already in it (the panel passes no openProfiler)
  const open = actions.openProfiler
    ? el('button', { class: 'ns-OpenProfiler jp-mod-styled', text: 'Open in Neuron Profiler', attrs: { type: 'button' } })
    : null;
  open?.addEventListener('click', () => actions.openProfiler?.(p.run_id ?? null));
  const warnings = p.warnings?.length
    ? el('ul', { class: 'ns-Warnings' }, ...p.warnings.map(w => el('li', { text: String(w) })))
    : null;
  const tabBox = tabs(pages);
  return el(
    'div',
    { class: 'ns-Profile' },
    el('div', { class: 'ns-TopRow' }, header(p), open),
    badges(p),
    breakdownSection(p, (label, ops) => openRows(tabBox, label, ops), actions),
    tabBox,
    warnings,
    provenanceNote(p)
  );
}

/** Select tab `label` and mark (and scroll to) the rows whose first cell names one of `ops`. */
export function openRows(tabBox: HTMLElement, label: string, ops: string[]): number {
  const button = [...tabBox.querySelectorAll<HTMLButtonElement>('.ns-TabBar .ns-Tab')].find(
    b => b.getAttribute('data-tab') === label
  );
  if (!button) {
    return 0;
  }
  button.click();
  const page = tabBox.querySelector('.ns-TabBody .ns-TabPage');
  const wanted = new Set(ops);
  let first: HTMLElement | null = null;
  let n = 0;
  page?.querySelectorAll<HTMLTableRowElement>('tbody tr').forEach(tr => {
    const hit = wanted.has((tr.cells[0]?.textContent ?? '').trim());
    tr.classList.toggle('ns-mod-justified', hit);
    if (hit) {
      n += 1;
      first = first ?? tr;
    }
  });
  (first as HTMLElement | null)?.scrollIntoView?.({ block: 'nearest' });
  return n;
}

/** A measured profile says what it was measured from and what it does not hold ("host time: not captured"). */
export function provenanceNote(p: IProfilePayload): HTMLElement | null {
  const prov = p.provenance;
  if (!prov) {
    return null;
  }
  const missing = (prov.not_captured ?? []).map(x => `${x}: not captured`).join('; ');
  const derived = Object.entries(prov.figures ?? {})
    .filter(([, v]) => v === 'derived' || v === 'modeled')
    .map(([k]) => k)
    .join(', ');
  const text =
    `Measured on Neuron hardware from ${prov.measured_from ?? 'an unknown source'}.` +
    (missing ? ` ${missing}.` : '') +
    (derived ? ` Derived or modeled: ${derived}.` : '');
  return el('div', { class: 'ns-Provenance', text });
}

// ---- the rendermime renderer ---------------------------------------------------------------------

export class ProfileRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(
    private _options: IRenderMime.IRendererOptions,
    private _deps: { actions: IProfileViewActions; status: INeuronStatusModel | null }
  ) {
    super();
    this.addClass('ns-ProfileRenderer');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[this._options.mimeType] as unknown as IProfilePayload | undefined;
    if (!data || typeof data !== 'object') {
      this.node.replaceChildren(el('div', { class: 'ns-Error', text: 'Invalid Neuron Studio profile payload' }));
      return Promise.resolve();
    }
    try {
      this.node.replaceChildren(renderProfile(data, this._deps.actions));
      this._deps.status?.update(data);
    } catch (error) {
      this.node.replaceChildren(
        el('div', { class: 'ns-Error', text: `Could not render the profile: ${String(error)}` })
      );
    }
    return Promise.resolve();
  }
}

export function createRendererFactory(deps: {
  actions: IProfileViewActions;
  status: INeuronStatusModel | null;
}): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [PROFILE_MIME],
    defaultRank: 0,
    createRenderer: options => new ProfileRenderer(options, deps)
  };
}
