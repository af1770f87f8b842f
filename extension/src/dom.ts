/**
 * Small DOM and formatting helpers shared by the renderer, the panel and the GPU views: elements are built
 * with `textContent` only (data never reaches innerHTML).
 */

// ---- small DOM and formatting helpers (shared with the panel) ----------------------------------

export type Child = Node | string | null | undefined | false;

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

/**
 * A name in a table cell (an op, a module path): one line, never broken mid-word; a name longer than the cell's
 * cap ends in an ellipsis, and its full text is the tooltip (`detail`, e.g. the op's reason, follows it there).
 */
export function nameCell(text: string, detail?: string): HTMLElement {
  return el('span', { class: 'ns-Name', text, title: detail ? `${text}\n${detail}` : text });
}

/**
 * Prose in a table cell that quotes code ("model.to(torch.bfloat16) and bf16 inputs"): it wraps at spaces, and a
 * dotted call too long for the cell may break only after a `.`, `(` or `,` followed by a name (a `<wbr>` there),
 * never mid-name or inside a number.
 */
export function proseCell(text: string, title?: string): HTMLElement {
  const parts: Child[] = [];
  for (const piece of text.split(/(?<=[A-Za-z0-9_)\]][.(,])(?=[A-Za-z_])/)) {
    parts.push(parts.length ? el('wbr') : null, piece);
  }
  return el('span', { class: 'ns-Prose', ...(title !== undefined ? { title } : {}) }, ...parts);
}

export const isNum = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);

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

/** Dollars to 3 significant digits in plain decimals ($0.0608, $2.40, $1,230), as the summary's own text
 * (profiler.summary_numbers.usd_text): never "$0.0000", never an exponent. */
export function fmtUsd(x: number | null | undefined): string {
  if (!isNum(x)) {
    return '—';
  }
  if (x === 0) {
    return '$0';
  }
  const r = Number(Math.abs(x).toPrecision(3));
  const decimals = Math.max(0, 2 - Math.floor(Math.log10(r)));
  const text = r.toLocaleString('en-US', { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
  return `${x < 0 ? '-' : ''}$${text}`;
}

/** A count that may be a per-step average (1 decimal when fractional). */
export function fmtCount(x: number | null | undefined): string {
  if (!isNum(x)) {
    return '—';
  }
  return Number.isInteger(x) ? x.toLocaleString() : x.toFixed(1);
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

/** A figure ("97.1 µs", "$0.0001", "9.22×", "77.1 µs – 127.1 µs", "1.07 G"): kept on one line in a table. */
const FIGURE = /^[-+−]?[$]?[\d.,]+\s?(?:[a-zA-Zµ%×/]{0,3})(?:\s[–-]\s[$]?[\d.,]+\s?[a-zA-Zµ%×]{0,3})?$|^[—–-]$/;

/** A table from rows of cells (strings or nodes); cells holding a figure are marked `ns-Num` (no wrapping). */
export function table(headers: string[], rows: Child[][], cls = ''): HTMLTableElement {
  const thead = el('thead', {}, el('tr', {}, ...headers.map(h => el('th', { text: h }))));
  const cell = (c: Child) => el('td', typeof c === 'string' && FIGURE.test(c) ? { class: 'ns-Num' } : {}, c);
  const tbody = el(
    'tbody',
    {},
    ...rows.map(cells => el('tr', {}, ...cells.map(cell)))
  );
  return el('table', { class: `ns-Table ${cls}`.trim() }, thead, tbody);
}
