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
  IProfilePayload,
  PROFILE_MIME
} from './tokens';

// ---- small DOM and formatting helpers (shared with the panel) ----------------------------------

type Child = Node | string | null | undefined | false;

/** Create an element with classes, attributes and children; strings become text nodes. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: { class?: string; attrs?: Record<string, string>; text?: string; title?: string } = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (props.class) {
    node.className = props.class;
  }
  if (props.attrs) {
    for (const [k, v] of Object.entries(props.attrs)) {
      node.setAttribute(k, v);
    }
  }
  if (props.title !== undefined) {
    node.title = props.title;
  }
  if (props.text !== undefined) {
    node.textContent = props.text;
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    node.appendChild(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

const isNum = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);

export function fmtNs(ns: number | null | undefined): string {
  if (!isNum(ns)) {
    return '—';
  }
  const abs = Math.abs(ns);
  if (abs >= 1e9) {
    return `${(ns / 1e9).toFixed(3)} s`;
  }
  if (abs >= 1e6) {
    return `${(ns / 1e6).toFixed(3)} ms`;
  }
  if (abs >= 1e3) {
    return `${(ns / 1e3).toFixed(1)} µs`;
  }
  return `${Math.round(ns)} ns`;
}

export function fmtPct(x: number | null | undefined, digits = 1): string {
  return isNum(x) ? `${(x * 100).toFixed(digits)}%` : '—';
}

export function fmtUsd(x: number | null | undefined): string {
  return isNum(x) ? `$${x.toFixed(x < 1 ? 4 : 2)}` : '—';
}

export function fmtSignedPct(x: number | null | undefined): string {
  return isNum(x) ? `${x > 0 ? '+' : ''}${x.toFixed(1)}%` : '—';
}

/** Horizontal bar with a label and a value, used for engine utilization. */
export function bar(label: string, fraction: number | null | undefined, detail?: string): HTMLElement {
  const frac = isNum(fraction) ? Math.max(0, Math.min(1, fraction)) : 0;
  const fill = el('div', { class: 'ns-Bar-fill' });
  fill.style.width = `${(frac * 100).toFixed(1)}%`;
  return el(
    'div',
    { class: 'ns-Bar', attrs: { 'data-engine': label } },
    el('span', { class: 'ns-Bar-label', text: label }),
    el('div', { class: 'ns-Bar-track' }, fill),
    el('span', { class: 'ns-Bar-value', text: fmtPct(fraction) + (detail ? ` · ${detail}` : '') })
  );
}

/** A table from rows of cells (strings or nodes). */
export function table(headers: string[], rows: Child[][], cls = ''): HTMLTableElement {
  const thead = el('thead', {}, el('tr', {}, ...headers.map(h => el('th', { text: h }))));
  const tbody = el(
    'tbody',
    {},
    ...rows.map(cells => el('tr', {}, ...cells.map(c => el('td', {}, c))))
  );
  return el('table', { class: `ns-Table ${cls}`.trim() }, thead, tbody);
}

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
}

export function kernelLink(kernel: IKernelRef, actions: IProfileViewActions): HTMLElement {
  const label = `${kernel.name} (${kernel.kind})`;
  const link = el('a', {
    class: 'ns-KernelLink',
    text: label,
    title: `${kernel.file}:${kernel.line}`,
    attrs: { href: '#', 'data-file': String(kernel.file), 'data-line': String(kernel.line) }
  });
  link.addEventListener('click', event => {
    event.preventDefault();
    event.stopPropagation();
    actions.openKernel?.(kernel);
  });
  return link;
}

export function hotOpsTable(ops: IHotOp[], actions: IProfileViewActions): HTMLTableElement {
  return table(
    ['Op', 'Module', 'Source', 'Device time', 'Share', 'Bound', 'Kernel'],
    ops.map(op => [
      el('span', { text: String(op.op), title: op.why ? String(op.why) : '' }),
      String(op.module ?? ''),
      String(op.source ?? ''),
      fmtNs(op.device_ns),
      fmtPct(op.share),
      el('span', { class: `ns-Bound ns-Bound-${String(op.bound)}`, text: String(op.bound ?? '') }),
      op.kernel ? kernelLink(op.kernel, actions) : '—'
    ]),
    'ns-HotOps'
  );
}

export function opTable(rows: IOpRow[]): HTMLTableElement {
  return table(
    ['Op', 'Count', 'Device time', 'Host time', 'Share', 'Engine', 'Bound', 'FLOPs', 'Bytes'],
    rows.map(r => [
      String(r.op),
      String(r.count),
      fmtNs(r.device_ns),
      fmtNs(r.host_ns),
      fmtPct(r.share),
      String(r.engine ?? ''),
      String(r.bound ?? ''),
      isNum(r.flops) ? r.flops.toLocaleString() : '—',
      isNum(r.bytes) ? r.bytes.toLocaleString() : '—'
    ]),
    'ns-OpTable'
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
      : null,
    el('span', { class: 'ns-Tag', text: `mode: ${p.mode}` }),
    el('span', { class: 'ns-Tag', text: `chip: ${p.chip}` }),
    el('span', { class: 'ns-Tag', text: `backend: ${p.backend}` }),
    p.modeled ? el('span', { class: 'ns-Tag ns-Modeled', text: 'modeled' }) : null,
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

function summarySection(p: IProfilePayload, actions: IProfileViewActions): HTMLElement {
  const compare = p.compare;
  const metrics = el(
    'div',
    { class: 'ns-Metrics' },
    metric(
      'step time',
      fmtNs(p.step_time_ns),
      compare ? `${fmtSignedPct(compare.step_time_delta_pct)} vs run #${compare.run_id}` : undefined
    ),
    metric('MFU', fmtPct(p.mfu)),
    metric('MBU', fmtPct(p.mbu)),
    isNum(p.host_time_ns) ? metric('host time', fmtNs(p.host_time_ns)) : null,
    isNum(p.launches) ? metric('launches', String(p.launches)) : null
  );
  const engines = el('div', { class: 'ns-Engines' }, el('h4', { text: 'Engine utilization' }));
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
        el('h4', { text: 'Cost per 1,000 steps (modeled)' }),
        el('div', {
          text: `${p.cost.chip}: ${fmtUsd(p.cost.per_1000_steps_usd)} at ${fmtUsd(p.cost.price_per_hour_usd)}/h`
        }),
        el('div', {
          text: `H100: ${fmtUsd(p.cost.h100_per_1000_steps_usd)} at ${fmtUsd(p.cost.h100_price_per_hour_usd)}/h`
        })
      )
    : null;
  const hot = p.hot_ops?.length
    ? el('div', {}, el('h4', { text: 'Hot ops' }), hotOpsTable(p.hot_ops.slice(0, 5), actions))
    : null;
  return el('div', { class: 'ns-Summary' }, metrics, engines, cost, hot);
}

function hotPathSection(p: IProfilePayload, actions: IProfileViewActions): HTMLElement {
  const ops = p.hot_ops ?? [];
  return el(
    'div',
    {},
    hotOpsTable(ops, actions),
    el(
      'ul',
      { class: 'ns-Why' },
      ...ops.filter(o => o.why).map(o => el('li', {}, el('b', { text: String(o.op) }), `: ${o.why}`))
    )
  );
}

function fallbacksSection(p: IProfilePayload): HTMLElement {
  const parts: Child[] = [];
  if (p.fallbacks?.length) {
    parts.push(
      el('h4', { text: 'CPU fallbacks' }),
      table(
        ['Op', 'Count', 'Reason', 'Time'],
        p.fallbacks.map(f => [String(f.op), String(f.count), String(f.reason), fmtNs(f.time_ns)])
      )
    );
  }
  if (p.sync_points?.length) {
    parts.push(
      el('h4', { text: 'Sync points' }),
      table(
        ['Op', 'Reason', 'Source'],
        p.sync_points.map(s => [String(s.op), String(s.reason), String(s.source)])
      )
    );
  }
  if (p.recompiles?.length) {
    parts.push(
      el('h4', { text: 'Recompiles' }),
      table(
        ['Graph', 'Shape', 'Reason'],
        p.recompiles.map(r => [String(r.graph), String(r.shape), String(r.reason)])
      )
    );
  }
  return el('div', {}, ...parts);
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
  if (p.hot_ops?.length) {
    pages.push(['Hot path', hotPathSection(p, actions)]);
  }
  if (p.op_table?.length) {
    pages.push(['Op table', opTable(p.op_table)]);
  }
  if (p.fallbacks?.length || p.sync_points?.length || p.recompiles?.length) {
    pages.push(['Fallbacks & syncs', fallbacksSection(p)]);
  }
  const open = el('button', {
    class: 'ns-OpenProfiler jp-mod-styled',
    text: 'Open in Neuron Profiler',
    attrs: { type: 'button' }
  });
  open.addEventListener('click', () => actions.openProfiler?.(p.run_id ?? null));
  const warnings = p.warnings?.length
    ? el('ul', { class: 'ns-Warnings' }, ...p.warnings.map(w => el('li', { text: String(w) })))
    : null;
  return el(
    'div',
    { class: 'ns-Profile' },
    el('div', { class: 'ns-TopRow' }, header(p), open),
    badges(p),
    tabs(pages),
    warnings
  );
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
