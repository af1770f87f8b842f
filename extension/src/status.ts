/** Status-bar item: backend · chip · mode of the active notebook's latest Neuron Studio profile. */
import { Widget } from '@lumino/widgets';

import { INeuronStatusModel, IProfilePayload } from './tokens';

export function statusText(p: IProfilePayload | null): string {
  if (!p) {
    return 'Neuron: —';
  }
  return `Neuron: ${p.backend} · ${p.chip} · ${p.mode}`;
}

export class NeuronStatusItem extends Widget {
  constructor(private _model: INeuronStatusModel) {
    super();
    this.addClass('ns-StatusItem');
    this._model.changed.connect(this._update, this);
    this._update();
  }

  dispose(): void {
    this._model.changed.disconnect(this._update, this);
    super.dispose();
  }

  private _update(): void {
    const p = this._model.current;
    this.node.textContent = statusText(p);
    const where = this._model.notebookPath;
    this.node.title =
      'Neuron Studio: backend · chip · mode of ' +
      (where === undefined ? 'the last profile' : `the latest profile in ${where}`) +
      (p?.run_id !== null && p?.run_id !== undefined ? ` (run #${p.run_id})` : '');
    if (p?.run_id !== null && p?.run_id !== undefined) {
      this.node.dataset.runId = String(p.run_id);
    } else {
      delete this.node.dataset.runId;
    }
  }
}
