/**
 * The trace viewer: host threads' launches and each NeuronCore's engine tracks on one time axis, drawn
 * on a canvas by flame-chart-js (one flame-chart plugin per lane, its time grid for the ticks, its marks
 * for the steps). Wheel zooms, drag pans, W/S/A/D (or +/-/arrows) zoom and pan from the keyboard, F fits
 * the run; hover shows an op, a click shows its shapes, module, source line and kernel link; search finds
 * ops by name; lines link a launch to the device op it started. With a server source, every settled view
 * asks for that window's level-of-detail boxes, so a 1M-op run stays a few thousand boxes.
 *
 * Everything from a trace reaches the page as `textContent` (or canvas text), never as markup.
 */
import { FlameChartContainer, FlameChartNode, MarksPlugin, TimeGridPlugin } from 'flame-chart-js';

import { PromiseDelegate } from '@lumino/coreutils';

import { el, fmtNs } from '../dom';
import { LanePlugin } from './lane';
import { ITraceLane, ITraceOpDetail, ITraceSource, ITraceWindow } from './types';

export const TRACK_COLORS: Record<string, string> = {
  host: '#e15759',
  tensor: '#4e79a7',
  vector: '#59a14f',
  scalar: '#f28e2b',
  gpsimd: '#b07aa1',
  dma: '#9c755f',
  collective: '#edc948',
  rank: '#76b7b2',
  regions: '#bab0ac'
};
/** A launch region the user's code ended (an in-place op, a host read...): the boundary to look at. */
const SPLIT_COLOR = '#d81b60';
/** Collective instances drawn as links at most (the server sends at most its own limit). */
const MAX_LINKS = 300;
const LANE_H = 24;
const AXIS_H = 22;
const MARKS_H = 14;
const LABEL_W = 150;
const LOD_DELAY_MS = 120;
const MAX_FLOWS = 400;
/** Time one frame may spend swapping in new boxes. */
const SWAP_BUDGET_MS = 12;
/** Fraction of the view fetched on each side, so a small pan has boxes before the next answer. */
const MARGIN = 0.5;

export interface ITraceViewerOptions {
  /** An op's source as a link that opens the cell or file at the line. */
  sourceLink: (source: string) => HTMLElement | string;
  /** The kernel that runs (or could replace) an op, as a link, or null. */
  kernelLink: (opName: string) => HTMLElement | null;
  /** Note under the toolbar (e.g. "overview: zoom magnifies, open the panel for detail"). */
  note?: string;
  /**
   * The run's whole-run overview stored with its summary (`trace_view`, the same lanes and boxes at a
   * coarser width). It is drawn at once while the source prepares its first answer (a server reading a cold
   * 1M-op run's table takes seconds), which replaces it.
   */
  overview?: ITraceWindow | null;
}

/** What a box carries besides what flame-chart-js draws. */
interface IBoxInfo {
  seq: number;
  count: number;
  busy: number;
  lane: number;
  startNs: number;
  endNs: number;
  /** Region lanes: the box's region (-1: merged) and how many regions in it the user's code ended. */
  region?: number;
  split?: number;
}
type BoxNode = FlameChartNode & { ns: IBoxInfo };
interface ISelectEvent {
  node: { source?: BoxNode } | null;
  type: string;
}

export class TraceViewer {
  readonly node: HTMLElement;

  constructor(
    private _source: ITraceSource,
    private _opts: ITraceViewerOptions
  ) {
    this._search.type = 'search';
    this._search.placeholder = 'Find op by name';
    this._search.setAttribute('aria-label', 'find op by name');
    const find = el('button', { class: 'jp-mod-styled ns-TraceFind', text: 'Find', attrs: { type: 'button' } });
    const fit = el('button', { class: 'jp-mod-styled ns-TraceFit', text: 'Whole run', attrs: { type: 'button' } });
    find.addEventListener('click', () => void this.find(this._search.value));
    this._search.addEventListener('keydown', e => {
      if (e.key === 'Enter') {
        void this.find(this._search.value);
      }
      e.stopPropagation();
    });
    fit.addEventListener('click', () => this.fit());
    this._stage.tabIndex = 0;
    // the viewer's keys are its own, not JupyterLab's shortcuts (a notebook's command mode binds A, D, F)
    this._stage.setAttribute('data-lm-suppress-shortcuts', 'true');
    this._stage.setAttribute('aria-label', 'trace: wheel or W/S to zoom, drag or A/D to pan, F for the whole run');
    this._stage.addEventListener('keydown', e => this._onKey(e));
    this._stage.addEventListener('mousemove', e => this._onMouseMove(e));
    this._stage.addEventListener('mouseleave', () => this._hideTooltip());
    this._stage.append(this._labels, this._canvas, this._overlay, this._tooltip);
    this.node = el(
      'div',
      { class: 'ns-TraceViewer' },
      el('div', { class: 'ns-TraceToolbar' }, this._search, find, fit, this._range, this._status),
      _opts.note ? el('div', { class: 'ns-TraceNote', text: _opts.note }) : null,
      this._stage,
      this._results,
      this._details
    );
    this._hideTooltip();
    void this._settled.promise.then(() => (this._settledDone = true));
    requestAnimationFrame(() => this._tick());
  }

  /** Resolves once the first window is drawn (rejects when the trace cannot be loaded). */
  get firstPaint(): Promise<void> {
    return this._painted.promise;
  }

  /** Whether it has asked its source for the first answer and not had it yet (a hidden viewer has not). */
  get loading(): boolean {
    return this._loading && !this._settledDone;
  }

  /** Resolves once the source's own first answer is drawn (or failed): the overview, if any, is replaced. */
  get settled(): Promise<void> {
    return this._settled.promise;
  }

  /** The visible window, ns relative to the run's origin. */
  get view(): { start: number; end: number } {
    const r = this._chart?.renderEngine;
    if (!r) {
      return { start: 0, end: 0 };
    }
    return { start: r.positionX * 1000, end: (r.positionX + r.getRealView()) * 1000 };
  }

  /** Show [start, end) ns (relative to the origin). */
  zoomTo(start: number, end: number): void {
    if (!this._chart || !(end > start)) {
      return;
    }
    this._chart.setZoom(start / 1000, end / 1000);
  }

  fit(): void {
    if (this._data) {
      this.zoomTo(this._data.run_start_ns - this._data.origin_ns, this._data.run_end_ns - this._data.origin_ns);
    }
  }

  /** Find ops whose name contains `query`; list them, each zooming to its op. */
  async find(query: string): Promise<void> {
    if (!query.trim()) {
      return;
    }
    try {
      const found = await this._source.search(query);
      const items = found.results.slice(0, 20).map(r => {
        const item = el('li', { class: 'ns-TraceResult', attrs: { 'data-seq': String(r.seq) } },
          el('a', { text: r.name, attrs: { href: '#' } }),
          el('span', { text: ` ${this._laneLabel(r.lane)} at ${fmtNs(r.start)} (${fmtNs(r.end - r.start)})` }));
        item.addEventListener('click', e => {
          e.preventDefault();
          void this.reveal(r.seq, r.start, r.end);
        });
        return item;
      });
      this._results.replaceChildren(
        el('div', { class: 'ns-TraceResultCount', text: `${found.total.toLocaleString()} ${found.total === 1 ? 'op matches' : 'ops match'} “${query.trim()}”${found.total > 20 ? ' (first 20)' : ''}${found.note ? ` · ${found.note}` : ''}` }),
        el('ul', {}, ...items)
      );
    } catch (error) {
      this._results.replaceChildren(el('div', { class: 'ns-Error', text: (error as Error).message }));
    }
  }

  /** Zoom to an op (with room around it) and show its details. */
  async reveal(seq: number, start: number, end: number): Promise<void> {
    const pad = Math.max((end - start) * 4, 200);
    this.zoomTo(start - pad, end + pad);
    await this.showOp(seq);
  }

  /** The op's details: name, lane, times, shapes, module, source link, kernel link. */
  async showOp(seq: number): Promise<void> {
    this._selected = seq;
    this._drawOverlay();
    let detail: ITraceOpDetail;
    try {
      detail = await this._source.op(seq);
    } catch (error) {
      this._details.replaceChildren(el('div', { class: 'ns-Error', text: (error as Error).message }));
      return;
    }
    if (this._selected !== seq) {
      return;
    }
    const op = detail.op;
    const origin = this._data?.origin_ns ?? 0;
    const rows: [string, Node | string][] = [
      ['Op', String(op.name ?? '')],
      ['Lane', this._laneLabel(detail.lane ?? detail.host_lane ?? '')],
      ['Start', op.start_ns === undefined ? '—' : fmtNs(op.start_ns - origin)],
      ['Duration', op.start_ns === undefined || op.end_ns === undefined ? '—' : fmtNs(op.end_ns - op.start_ns)],
      ['Input shapes', String(op.input_shapes || '—')],
      ['Output shapes', String(op.output_shapes || '—')],
      ['Module', String(op.module || '—')],
      ['Source', op.source ? this._opts.sourceLink(String(op.source)) : '—']
    ];
    if (op.launch_ns) {
      rows.push(['Launch', `${fmtNs(op.launch_ns)} on ${this._laneLabel(detail.host_lane ?? '')}`]);
    }
    if (op.bound) {
      rows.push(['Bound', String(op.bound)]);
    }
    const kernel = this._opts.kernelLink(String(op.name ?? ''));
    rows.push(['Kernel', kernel ?? 'none in the registry']);
    this._details.replaceChildren(
      el('table', { class: 'ns-Table ns-TraceDetails', attrs: { 'data-seq': String(seq) } },
        el('tbody', {}, ...rows.map(([k, v]) => el('tr', {}, el('th', { text: k }), el('td', {}, v)))))
    );
  }

  // ---- drawing ---------------------------------------------------------------------------------

  private async _load(width: number): Promise<void> {
    this._status.textContent = 'loading…';
    const overview = usableOverview(this._opts.overview);
    if (overview) {
      // the stored overview now, the server's whole-run answer when it comes (asked for at once)
      const ticket = ++this._lodTicket;
      const answer = this._source.window(undefined, undefined, width);
      this._show(overview, width, 'overview');
      const span = overview.run_end_ns - overview.run_start_ns;
      // what is on its way covers the whole run at this width: no other request until it is in
      this._fetched = { lo: overview.run_start_ns - overview.origin_ns, hi: overview.run_end_ns - overview.origin_ns, pxNs: span / Math.max(width, 1) };
      requestAnimationFrame(() => this._markPainted('data-first-paint-ms', this._painted));
      try {
        const data = await answer;
        if (ticket === this._lodTicket) {
          this._fetched = { lo: data.start_ns - data.origin_ns, hi: data.end_ns - data.origin_ns, pxNs: data.px_ns };
          this._replace(data);
        }
      } catch (error) {
        this._status.textContent = `${this._summaryText(overview)} · the run's overview: finer boxes could not be loaded (${(error as Error).message})`;
        this._fetched = { lo: overview.start_ns - overview.origin_ns, hi: overview.end_ns - overview.origin_ns, pxNs: overview.px_ns };
      }
      this._settled.resolve(); // drawn, or failed (the status says so); a newer window may still be on its way
      return;
    }
    const data = await this._source.window(undefined, undefined, width);
    this._fetched = { lo: data.start_ns - data.origin_ns, hi: data.end_ns - data.origin_ns, pxNs: data.px_ns };
    this._show(data, width, 'source');
    requestAnimationFrame(() => {
      this._markPainted('data-first-paint-ms', this._painted);
      this._markPainted('data-source-paint-ms', this._settled);
    });
  }

  /** Resolve `done` and note on the node how long after the viewer's creation (ms; benchmarks read it). */
  private _markPainted(attr: string, done: PromiseDelegate<void>): void {
    if (!this.node.hasAttribute(attr)) {
      this.node.setAttribute(attr, (performance.now() - this._born).toFixed(1));
    }
    done.resolve();
  }

  /** Draw `data` on a new chart; `from` says whether it is the stored overview or the source's answer. */
  private _show(data: ITraceWindow, width: number, from: 'overview' | 'source'): void {
    this._data = data;
    this._create(data, width);
    this.node.setAttribute('data-from', from);
    this._status.textContent =
      from === 'overview' ? `${this._summaryText(data)} · the run's overview; finer boxes loading…` : this._summaryText(data);
  }

  private _create(data: ITraceWindow, width: number): void {
    this._chart?.interactionsEngine.destroy();
    this._lanePlugins = data.lanes.map(lane => new LanePlugin({ data: this._nodes(data, lane), name: lane.id }));
    const end = (data.run_end_ns - data.origin_ns) / 1000;
    const marks = data.steps.map(s => ({ shortName: `step ${s.step}`, fullName: `step ${s.step} starts`, timestamp: s.start / 1000, color: '#d62728' }));
    marks.push({ shortName: 'end', fullName: 'end of the run', timestamp: end, color: '#999999' });
    if (!data.steps.some(s => s.start <= 0)) {
      marks.push({ shortName: 'start', fullName: 'start of the run', timestamp: (data.run_start_ns - data.origin_ns) / 1000, color: '#999999' });
    }
    const height = AXIS_H + MARKS_H + data.lanes.length * LANE_H;
    this._canvas.width = width;
    this._canvas.height = height;
    this._canvas.style.width = `${width}px`;
    this._canvas.style.height = `${height}px`;
    this._chart = new FlameChartContainer({
      canvas: this._canvas,
      plugins: [new TimeGridPlugin(), new MarksPlugin({ data: marks }), ...this._lanePlugins],
      settings: {
        options: { timeUnits: 'µs', tooltip: (region: unknown) => this._showTooltip(region) },
        styles: { main: { blockHeight: LANE_H - 8 } }
      }
    });
    // a click selects a box in its lane's plugin: flame-chart-js's FlameChartContainer (unlike its FlameChart
    // wrapper) does not pass its plugins' `select` on, so each lane's plugin is listened to itself. The plugins
    // are node-style EventEmitters (typed through @types/node, not loaded here).
    for (const plugin of this._lanePlugins) {
      const emitter = plugin as unknown as { on: (name: string, cb: (event: ISelectEvent) => void) => void };
      emitter.on('select', event => this._onSelect(event));
    }
    this._width = width;
    this._labelsDrawn = -1;
    this._placeLabels();
  }

  /** A clicked box: a single op shows its details; a merged box zooms in so its ops separate. */
  private _onSelect(event: ISelectEvent): void {
    const box = event?.node?.source;
    if (box?.ns && box.ns.seq >= 0) {
      void this.showOp(box.ns.seq);
    } else if (box?.ns) {
      this.zoomTo(box.ns.startNs, box.ns.endNs);
    }
  }

  private _nodes(data: ITraceWindow, lane: ITraceLane): BoxNode[] {
    const idx = data.lanes.indexOf(lane);
    const color = TRACK_COLORS[lane.track] ?? '#888888';
    const merged = color + '99';
    const out: BoxNode[] = [];
    const summary = lane.kind === 'rank';
    if (lane.kind === 'regions') {
      return this._regionNodes(data, lane, idx, color);
    }
    for (let i = 0; i < lane.start.length; i++) {
      const single = lane.count[i] === 1 && lane.seq[i] >= 0;
      const dur = lane.end[i] - lane.start[i];
      out.push({
        // a rank's summary lane: how busy computing its box's time was (no op names at this level)
        name: summary ? `${Math.round((100 * lane.busy[i]) / Math.max(dur, 1))}% busy`
          : single ? data.names[lane.name[i]] ?? 'op' : `${lane.count[i]} ops`, // not toLocaleString: far too slow per box
        start: lane.start[i] / 1000,
        duration: Math.max(dur, 0.001) / 1000,
        color: single ? color : merged,
        ns: { seq: single ? lane.seq[i] : -1, count: lane.count[i], busy: lane.busy[i], lane: idx, startNs: lane.start[i], endNs: lane.end[i] }
      });
    }
    return out;
  }

  /** A core's launch regions: one box per region (its op count), the ones the user's code ended in SPLIT_COLOR. */
  private _regionNodes(data: ITraceWindow, lane: ITraceLane, idx: number, color: string): BoxNode[] {
    const out: BoxNode[] = [];
    for (let i = 0; i < lane.start.length; i++) {
      const region = lane.region?.[i] ?? -1;
      const split = lane.split?.[i] ?? 0;
      const info = region >= 0 ? data.regions?.[String(region)] : undefined;
      const single = lane.count[i] === 1 && region >= 0;
      const base = split > 0 ? SPLIT_COLOR : color;
      out.push({
        name: single ? `${info?.n_ops ?? '?'} ops` : `${lane.count[i]} regions`,
        start: lane.start[i] / 1000,
        duration: Math.max(lane.end[i] - lane.start[i], 0.001) / 1000,
        color: single ? base : base + '99',
        ns: { seq: -1, count: lane.count[i], busy: lane.busy[i], lane: idx, startNs: lane.start[i], endNs: lane.end[i], region, split }
      });
    }
    return out;
  }

  /** New boxes for the same lanes, keeping the view (flame-chart-js resets it on new data). */
  private _replace(data: ITraceWindow): void {
    const chart = this._chart;
    if (!chart) {
      return;
    }
    const old = this._data;
    if (!old || old.origin_ns !== data.origin_ns || old.lanes.length !== data.lanes.length ||
        old.lanes.some((lane, i) => lane.id !== data.lanes[i].id)) {
      // other lanes (or another origin) than those drawn: a new chart on the same absolute view
      const { start, end } = this.view;
      const shift = (old?.origin_ns ?? data.origin_ns) - data.origin_ns;
      ++this._lodTicket;
      this._show(data, this._width, 'source');
      this.zoomTo(start + shift, end + shift);
      this._drawOverlay();
      requestAnimationFrame(() => this._markPainted('data-source-paint-ms', this._settled));
      return;
    }
    // a few lanes per frame, so swapping in a window's boxes never holds one frame for long
    const pending = data.lanes.map((lane, i) => ({ lane, i }));
    const ticket = this._lodTicket;
    const step = () => {
      if (ticket !== this._lodTicket) {
        return; // a newer answer is on its way
      }
      const t0 = performance.now();
      while (pending.length && performance.now() - t0 < SWAP_BUDGET_MS) {
        const { lane, i } = pending.shift()!;
        const plugin = this._lanePlugins[i];
        plugin.data = this._nodes(data, lane);
        plugin.parseData();
        plugin.initData();
        plugin.reset();
      }
      this._swapMs = Math.max(this._swapMs, performance.now() - t0);
      if (pending.length) {
        requestAnimationFrame(step);
        return;
      }
      const { start, end } = this.view;
      chart.renderEngine.calcMinMax();
      this._data = data;
      this.node.setAttribute('data-from', 'source');
      this._status.textContent = this._summaryText(data);
      this.zoomTo(start, end);
      this._drawOverlay();
      this.node.setAttribute('data-swap-ms', this._swapMs.toFixed(1));
      requestAnimationFrame(() => this._markPainted('data-source-paint-ms', this._settled));
    };
    step();
  }

  private _placeLabels(): void {
    const chart = this._chart;
    if (!chart || !this._data) {
      return;
    }
    const offset = 2; // time grid and marks come first
    const toggle = this._source.toggleRank?.bind(this._source);
    const labels = this._data.lanes.map((lane, i) => {
      const engine = chart.renderEngine.children[i + offset];
      const isRank = lane.rank !== undefined && toggle !== undefined;
      const text = isRank ? `${lane.kind === 'rank' ? '▸' : '▾'} ${lane.label}` : lane.label;
      const title = lane.kind === 'rank'
        ? `${lane.label}: compute activity on the job's clock; click to show its host timeline`
        : lane.kind === 'regions'
          ? `${lane.label}: ${lane.total.toLocaleString()} launched regions; a box ends where the next launch starts, the ones your code ended are marked`
          : `${lane.label}: ${lane.total.toLocaleString()} ops${isRank ? '; click to fold the rank' : ''}`;
      const label = el('div', {
        class: `ns-TraceLabel ns-TraceLabel-${lane.kind}${lane.straggler ? ' ns-TraceLabel-straggler' : ''}`,
        text,
        title,
        attrs: lane.rank !== undefined ? { 'data-rank': String(lane.rank) } : {}
      });
      if (isRank) {
        label.style.cursor = 'pointer';
        label.addEventListener('click', () => {
          toggle!(lane.rank!);
          const { start, end } = this.view;
          void this._fetchWindow(start, end);
        });
      }
      label.style.top = `${engine?.position ?? 0}px`;
      label.style.height = `${LANE_H}px`;
      return label;
    });
    this._labels.replaceChildren(...labels);
  }

  private _laneY(lane: number): number {
    const engine = this._chart?.renderEngine.children[lane + 2];
    return (engine?.position ?? 0) + (LANE_H - 8) / 2 + 1;
  }

  /** Flow lines from each visible launch to the device op it started; the selected op's in bold. */
  private _drawOverlay(): void {
    const ctx = this._overlay.getContext('2d');
    const chart = this._chart;
    const data = this._data;
    if (!ctx || !chart || !data) {
      return;
    }
    if (this._overlay.width !== this._canvas.width || this._overlay.height !== this._canvas.height) {
      this._overlay.width = this._canvas.width; // a new backing store: only when the size changed
      this._overlay.height = this._canvas.height;
    }
    ctx.clearRect(0, 0, this._overlay.width, this._overlay.height);
    const r = chart.renderEngine;
    const x = (ns: number) => (ns / 1000 - r.positionX) * r.zoom;
    const deviceStart = this._deviceStarts(data);
    let drawn = 0;
    data.lanes.forEach((lane, li) => {
      if (lane.kind !== 'host') {
        return;
      }
      lane.seq.forEach((seq, i) => {
        const target = seq >= 0 ? deviceStart.get(seq) : undefined;
        if (!target || drawn >= MAX_FLOWS) {
          return;
        }
        const x1 = x(lane.end[i]);
        const x2 = x(target[0]);
        if ((x1 < 0 && x2 < 0) || (x1 > r.width && x2 > r.width)) {
          return;
        }
        drawn++;
        const y1 = this._laneY(li);
        const y2 = this._laneY(target[1]);
        const bold = seq === this._selected;
        ctx.strokeStyle = bold ? '#000' : 'rgba(60,60,60,0.55)';
        ctx.lineWidth = bold ? 2 : 1;
        ctx.beginPath();
        ctx.moveTo(x1, y1);
        ctx.lineTo(x2, y2);
        ctx.stroke();
        ctx.beginPath(); // arrow head at the device op
        ctx.moveTo(x2, y2);
        ctx.lineTo(x2 - 4, y2 - 5);
        ctx.lineTo(x2 + 4, y2 - 5);
        ctx.closePath();
        ctx.fillStyle = ctx.strokeStyle;
        ctx.fill();
      });
    });
    this.node.setAttribute('data-flows', String(drawn));
    this._drawLinks(ctx, x);
  }

  /** Job view: each collective instance as a line through every rank's arrival, the last rank's in red. */
  private _drawLinks(ctx: CanvasRenderingContext2D, x: (ns: number) => number): void {
    const data = this._data;
    const links = data?.links ?? [];
    if (!data || !links.length) {
      this.node.setAttribute('data-links', '0');
      return;
    }
    const laneIndex = new Map(data.lanes.map((lane, i) => [lane.id, i] as [string, number]));
    const width = this._overlay.width;
    let drawn = 0;
    for (const link of links.slice(0, MAX_LINKS)) {
      const points = link.lanes
        .map((id, i) => [laneIndex.get(id), link.arrival[i], id] as [number | undefined, number, string])
        .filter((p): p is [number, number, string] => p[0] !== undefined)
        .sort((a, b) => a[0] - b[0]);
      const xs = points.map(p => x(p[1]));
      if (!points.length || Math.max(...xs) < 0 || Math.min(...xs) > width) {
        continue;
      }
      drawn++;
      ctx.strokeStyle = 'rgba(120,90,0,0.6)';
      ctx.lineWidth = 1;
      ctx.beginPath();
      points.forEach((p, i) => (i ? ctx.lineTo(xs[i], this._laneY(p[0])) : ctx.moveTo(xs[i], this._laneY(p[0]))));
      ctx.stroke();
      points.forEach((p, i) => {
        const last = p[2] === link.last_lane;
        ctx.fillStyle = last ? '#d62728' : 'rgba(120,90,0,0.8)';
        ctx.beginPath();
        ctx.arc(xs[i], this._laneY(p[0]), last ? 4 : 2, 0, 2 * Math.PI);
        ctx.fill();
      });
    }
    this.node.setAttribute('data-links', String(drawn));
  }

  /** Each one-op device box's start and lane by seq, built once per window answer (not per frame). */
  private _deviceStarts(data: ITraceWindow): Map<number, [number, number]> {
    if (this._deviceStartsOf?.data === data) {
      return this._deviceStartsOf.map;
    }
    const map = new Map<number, [number, number]>();
    data.lanes.forEach((lane, li) => {
      if (lane.kind === 'host') {
        return;
      }
      lane.seq.forEach((seq, i) => {
        if (seq >= 0 && !map.has(seq)) {
          map.set(seq, [lane.start[i], li]);
        }
      });
    });
    this._deviceStartsOf = { data, map };
    return map;
  }

  // ---- interaction -----------------------------------------------------------------------------

  private _tick(): void {
    if (this._disposed) {
      return;
    }
    const width = Math.floor(this._stage.clientWidth - LABEL_W);
    if (!this._chart && !this._loading && width > 50) {
      this._loading = true;
      this._load(width).catch(error => {
        this._painted.reject(error);
        this._settled.resolve();
        this._status.textContent = '';
        this._stage.replaceChildren(el('div', { class: 'ns-Error', text: `Trace not available: ${(error as Error).message}` }));
      });
    } else if (this._chart && width > 50 && Math.abs(width - this._width) > 4) {
      const { start, end } = this.view;
      this._width = width;
      this._canvas.style.width = `${width}px`;
      this._chart.resize(width, this._canvas.height);
      this.zoomTo(start, end);
      this._placeLabels();
    }
    if (this._chart) {
      const { start, end } = this.view;
      const key = `${start.toFixed(3)}:${end.toFixed(3)}`;
      if (key !== this._lastView) {
        this._lastView = key;
        this._onViewChange(start, end);
      }
      if (!this._chart.interactionsEngine.getHoveredRegion()) {
        this._hideTooltip();
      }
      this._publishEdgeLabels();
    }
    if (this._seenConnected && !this.node.isConnected) {
      this._disposed = true;
      this._chart?.interactionsEngine.destroy();
      return;
    }
    this._seenConnected = this._seenConnected || this.node.isConnected;
    requestAnimationFrame(() => this._tick());
  }

  /**
   * The labels drawn on boxes cut by the view's edges, as `data-edge-labels` (JSON): what a cut box shows is
   * read from the page (browser tests) rather than from the canvas's pixels.
   */
  private _publishEdgeLabels(): void {
    const drawn = this._lanePlugins.reduce((sum, plugin) => sum + plugin.labelsDrawn, 0);
    if (drawn !== this._labelsDrawn) {
      this._labelsDrawn = drawn;
      this.node.setAttribute('data-edge-labels', JSON.stringify(this._lanePlugins.flatMap(plugin => plugin.edgeLabels)));
    }
  }

  private _onViewChange(start: number, end: number): void {
    const ticks: string[] = [];
    this._chart?.timeGrid.forEachTime((px: number, t: number) => {
      if (px >= 0 && px <= this._width) {
        ticks.push(fmtNs(t * 1000));
      }
    });
    this.node.setAttribute('data-view-start', String(Math.round(start)));
    this.node.setAttribute('data-view-end', String(Math.round(end)));
    this.node.setAttribute('data-ticks', ticks.join('|'));
    this._range.textContent = `${fmtNs(start)} – ${fmtNs(end)} (${fmtNs(end - start)} shown)`;
    this._drawOverlay();
    if (!this._source.levelOfDetail || !this._data) {
      return;
    }
    const have = this._fetched;
    const pxNs = (end - start) / Math.max(this._width, 1);
    if (have && start >= have.lo && end <= have.hi && pxNs > have.pxNs / 1.5 && pxNs < have.pxNs * 1.5) {
      return; // the boxes in hand cover this view at about this resolution
    }
    if (this._lodTimer !== null) {
      clearTimeout(this._lodTimer);
    }
    this._lodTimer = window.setTimeout(() => void this._fetchWindow(start, end), LOD_DELAY_MS);
  }

  private async _fetchWindow(start: number, end: number): Promise<void> {
    const data = this._data;
    if (!data) {
      return;
    }
    const span = end - start;
    const lo = Math.max(data.run_start_ns - data.origin_ns, start - span * MARGIN);
    const hi = Math.min(data.run_end_ns - data.origin_ns, end + span * MARGIN);
    if (!(hi > lo)) {
      return;
    }
    const width = this._width * ((hi - lo) / Math.max(span, 1e-9));
    const ticket = ++this._lodTicket;
    try {
      const answer = await this._source.window(lo + data.origin_ns, hi + data.origin_ns, Math.min(8192, width));
      if (ticket === this._lodTicket) {
        this._fetched = { lo, hi, pxNs: (hi - lo) / Math.min(8192, width) };
        this._replace(answer);
      }
    } catch (error) {
      this._status.textContent = `could not load this window: ${(error as Error).message}`;
    }
  }

  private _onKey(e: KeyboardEvent): void {
    const { start, end } = this.view;
    const span = end - start;
    const mid = (start + end) / 2;
    const zoom = (f: number) => this.zoomTo(mid - (span * f) / 2, mid + (span * f) / 2);
    const pan = (f: number) => this.zoomTo(start + span * f, end + span * f);
    const keys: Record<string, () => void> = {
      w: () => zoom(0.5), '=': () => zoom(0.5), '+': () => zoom(0.5), ArrowUp: () => zoom(0.5),
      s: () => zoom(2), '-': () => zoom(2), ArrowDown: () => zoom(2),
      a: () => pan(-0.2), ArrowLeft: () => pan(-0.2), d: () => pan(0.2), ArrowRight: () => pan(0.2),
      f: () => this.fit(), Home: () => this.fit()
    };
    const action = keys[e.key];
    if (action) {
      e.preventDefault();
      e.stopPropagation();
      action();
    }
  }

  private _onMouseMove(e: MouseEvent): void {
    const box = this._stage.getBoundingClientRect();
    this._mouse = { x: e.clientX - box.left, y: e.clientY - box.top };
  }

  private _showTooltip(region: unknown): boolean {
    const node = (region as { data?: { source?: BoxNode } } | null)?.data?.source;
    if (!node?.ns || !this._data) {
      return true;
    }
    const lane = this._data.lanes[node.ns.lane];
    const lines = lane?.kind === 'rank'
      ? [`${lane.label}`, `computing ${fmtNs(node.ns.busy)} of ${fmtNs(node.ns.endNs - node.ns.startNs)} (measured host ops)`, 'click the rank\'s name to show its timeline']
      : lane?.kind === 'regions'
        ? this._regionLines(lane, node.ns)
      : node.ns.count === 1
        ? [node.name, `${lane?.label ?? ''} · ${fmtNs(node.ns.endNs - node.ns.startNs)} at ${fmtNs(node.ns.startNs)}`, 'click for shapes, module, source']
        : [`${node.ns.count.toLocaleString()} ops merged`, `${lane?.label ?? ''} · busy ${fmtNs(node.ns.busy)} in ${fmtNs(node.ns.endNs - node.ns.startNs)}`, 'zoom in (or click) to separate them'];
    this._tooltip.replaceChildren(...lines.map((t, i) => el(i === 0 ? 'b' : 'div', { text: t })));
    this._tooltip.style.left = `${Math.min(this._mouse.x + 12, this._stage.clientWidth - 260)}px`;
    this._tooltip.style.top = `${this._mouse.y + 14}px`;
    this._tooltip.hidden = false;
    return true;
  }

  /** A launch region's tooltip: its ops, what ended it and, where the user's code ended it, the fix. */
  private _regionLines(lane: ITraceLane, box: IBoxInfo): string[] {
    const span = `${lane.label} · ${fmtNs(box.endNs - box.startNs)} at ${fmtNs(box.startNs)}`;
    if (box.count !== 1 || (box.region ?? -1) < 0) {
      const split = box.split ? `, ${box.split} ended by your code` : '';
      return [`${box.count.toLocaleString()} launch regions merged${split}`, span, 'zoom in (or click) to separate them'];
    }
    const r = this._data?.regions?.[String(box.region)] ?? {};
    const ops = r.first_op === r.last_op ? `${r.first_op ?? '?'}` : `${r.first_op ?? '?'} … ${r.last_op ?? '?'}`;
    const lines = [`launch region: ${r.n_ops ?? '?'} ops (${ops})`, span, `ended: ${r.ended_by ?? '?'}`];
    if (r.fix) {
      lines.push(`fix: ${r.fix}`);
    }
    return lines;
  }

  private _hideTooltip(): void {
    this._tooltip.hidden = true;
  }

  private _laneLabel(id: string): string {
    return this._data?.lanes.find(l => l.id === id)?.label ?? id;
  }

  private _summaryText(d: ITraceWindow): string {
    const boxes = d.lanes.reduce((n, l) => n + l.start.length, 0);
    if (d.job) {
      const hidden = (d.links_in_window ?? 0) > (d.links?.length ?? 0)
        ? ` · ${d.links_in_window!.toLocaleString()} collectives in view: zoom in to link them across ranks` : '';
      const strag = d.job.straggler !== null ? ` · straggler: rank ${d.job.straggler}` : '';
      return `${d.job.ranks.length} ranks · ${boxes.toLocaleString()} boxes at ${fmtNs(d.px_ns)}/px · click a rank to expand it${strag}${hidden} · ${d.clock ?? ''}`;
    }
    return `${d.total_ops.toLocaleString()} ops · ${boxes.toLocaleString()} boxes at ${fmtNs(d.px_ns)}/px${d.clock ? ` · ${d.clock} clock` : ''}`;
  }

  private _chart: FlameChartContainer | null = null;
  private _lanePlugins: LanePlugin[] = [];
  private _labelsDrawn = -1;
  private _data: ITraceWindow | null = null;
  private _width = 0;
  private _loading = false;
  private _disposed = false;
  private _seenConnected = false;
  private _lastView = '';
  private _lodTimer: number | null = null;
  private _lodTicket = 0;
  private _swapMs = 0;
  private _fetched: { lo: number; hi: number; pxNs: number } | null = null;
  private _born = performance.now();
  private _deviceStartsOf: { data: ITraceWindow; map: Map<number, [number, number]> } | null = null;
  private _painted = new PromiseDelegate<void>();
  private _settled = new PromiseDelegate<void>();
  private _settledDone = false;
  private _selected: number | null = null;
  private _mouse = { x: 0, y: 0 };
  private _search = el('input', { class: 'ns-TraceSearch' });
  private _range = el('span', { class: 'ns-TraceRange' });
  private _status = el('span', { class: 'ns-TraceStatus' });
  private _labels = el('div', { class: 'ns-TraceLabels' });
  private _canvas = el('canvas', { class: 'ns-TraceCanvas' });
  private _overlay = el('canvas', { class: 'ns-TraceOverlay' });
  private _tooltip = el('div', { class: 'ns-TraceTooltip' });
  private _stage = el('div', { class: 'ns-TraceStage' });
  private _results = el('div', { class: 'ns-TraceResults' });
  private _details = el('div', { class: 'ns-TraceDetailsBox' });
}

/** A stored overview the viewer can draw (a summary from an older studio may carry none or another shape). */
function usableOverview(o: ITraceWindow | null | undefined): ITraceWindow | null {
  return o && Array.isArray(o.lanes) && o.lanes.length && Number.isFinite(o.run_end_ns) && Number.isFinite(o.origin_ns) ? o : null;
}
