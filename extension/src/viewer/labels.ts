/**
 * Where a box's label goes on the timeline, as Perfetto and Chrome tracing lay it out: in the part of the box
 * that is in view (a box cut by the view's left edge keeps its label at that edge, not at its off-screen
 * start), shortened to its longest prefix plus an ellipsis only when that visible part is too narrow, and
 * never wider than it. Pure layout: no canvas, no flame-chart-js, so it is tested on its own.
 */

export const ELLIPSIS = '…';

/** A label as drawn: its text and its left x (px from the view's left edge). */
export interface IBoxLabel {
  text: string;
  x: number;
}

/**
 * `name` if it fits `maxWidth` px, else its longest prefix (whole code points, trailing spaces dropped)
 * followed by an ellipsis that fits, else '' (not even one character fits).
 */
export function fitLabel(name: string, maxWidth: number, measure: (text: string) => number): string {
  if (!name || !(maxWidth > 0)) {
    return '';
  }
  if (measure(name) <= maxWidth) {
    return name;
  }
  const chars = Array.from(name);
  const prefix = (n: number) => chars.slice(0, n).join('').trimEnd();
  let lo = 0; // the longest prefix known to fit with its ellipsis
  let hi = chars.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (measure(prefix(mid) + ELLIPSIS) <= maxWidth) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const text = prefix(lo);
  return text ? text + ELLIPSIS : '';
}

/**
 * The label of a box at `boxX` px, `boxW` px wide, in a view `viewWidth` px wide: laid out `padding` px inside
 * the box's visible part on both sides, or null when nothing of it fits there.
 */
export function layoutLabel(
  name: string,
  boxX: number,
  boxW: number,
  viewWidth: number,
  padding: number,
  measure: (text: string) => number
): IBoxLabel | null {
  const left = Math.max(boxX, 0);
  const right = Math.min(boxX + boxW, viewWidth);
  const text = fitLabel(name, right - left - 2 * padding, measure);
  return text ? { text, x: left + padding } : null;
}
