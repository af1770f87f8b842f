/** Status-bar item: backend · chip · mode of the last Neuron Studio profile rendered. */
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
    this.node.title = 'Neuron Studio: backend · chip · mode of the last profile';
    this._model.changed.connect(this._update, this);
    this._update();
  }

  dispose(): void {
    this._model.changed.disconnect(this._update, this);
    super.dispose();
  }

  private _update(): void {
    this.node.textContent = statusText(this._model.current);
  }
}
