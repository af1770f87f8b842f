/**
 * One lane of the trace viewer: flame-chart-js's flame-chart plugin, with its boxes' labels laid out by
 * `layoutLabel` (in the visible part of a box cut by the view's edge, a prefix and an ellipsis only when that
 * part is too narrow) instead of flame-chart-js's own text pass, which keeps a cut box's label at its
 * off-screen start, shortens it in the middle by an average character width and lets it run past the view.
 */
import { FlameChartPlugin } from 'flame-chart-js';

import { layoutLabel } from './labels';

/** A label of a box cut by the view's left or right edge, as last drawn (px from the view's left edge). */
export interface IEdgeLabel {
  lane: string;
  name: string;
  text: string;
  x: number;
  width: number;
  boxStart: number;
  boxEnd: number;
  viewWidth: number;
}

/** What flame-chart-js queues for a box's label (its `Text`). */
interface IQueuedText {
  text: string;
  x: number;
  y: number;
  w: number;
}

/** The parts of flame-chart-js's lane render engine the labels are drawn with. */
interface ITextEngine {
  ctx: CanvasRenderingContext2D;
  width: number;
  blockHeight: number;
  blockPaddingLeftRight: number;
  blockPaddingTopBottom: number;
  styles: { fontColor: string };
  setCtxValue: (field: string, value: number | string) => void;
  renderTexts: (texts: IQueuedText[]) => void;
}

/** Widths of whole names measured once per lane (a lane's names repeat: thousands of `aten::mm`). */
const MAX_CACHED = 4096;

export class LanePlugin extends FlameChartPlugin {
  /** The labels of boxes cut by the view's edges, as this lane last drew them. */
  edgeLabels: IEdgeLabel[] = [];
  /** Bumped on every draw of this lane's labels, so the viewer republishes `edgeLabels` only when they changed. */
  labelsDrawn = 0;

  // flame-chart-js calls `init` with the lane's own offscreen engine, whose text pass is replaced here
  init(...args: Parameters<FlameChartPlugin['init']>): void {
    super.init(...args);
    const engine = args[0] as unknown as ITextEngine;
    const widths = new Map<string, number>();
    const measure = (text: string): number => {
      let width = widths.get(text);
      if (width === undefined) {
        width = engine.ctx.measureText(text).width;
        if (widths.size >= MAX_CACHED) {
          widths.clear();
        }
        widths.set(text, width);
      }
      return width;
    };
    engine.renderTexts = texts => this._drawLabels(engine, texts, measure);
  }

  render(): void {
    if (this.edgeLabels.length) {
      this.edgeLabels = [];
      this.labelsDrawn++;
    }
    super.render();
  }

  private _drawLabels(engine: ITextEngine, texts: IQueuedText[], measure: (text: string) => number): void {
    const { ctx, width: viewWidth, blockPaddingLeftRight: padding } = engine;
    const baseline = engine.blockHeight - engine.blockPaddingTopBottom;
    const edge: IEdgeLabel[] = [];
    engine.setCtxValue('fillStyle', engine.styles.fontColor);
    for (const { text: name, x, y, w } of texts) {
      const label = layoutLabel(name, x, w, viewWidth, padding, measure);
      if (!label) {
        continue;
      }
      ctx.fillText(label.text, label.x, y + baseline);
      if (x < 0 || x + w > viewWidth) {
        edge.push({ lane: this.name, name, text: label.text, x: label.x, width: measure(label.text), boxStart: x, boxEnd: x + w, viewWidth });
      }
    }
    this.edgeLabels = edge;
    this.labelsDrawn++;
  }
}
