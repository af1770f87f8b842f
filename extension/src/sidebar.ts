/**
 * The left-sidebar entry of the Neuron Profiler: the current notebook's runs (newest first), then the runs with no
 * notebook in its folder (imported traces, scripts, jobs), and a button that opens the panel; a click on a run
 * opens the panel on it. Its icon is the launcher tile's too.
 */
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { el, fmtNs } from './dom';
import { requestAPI } from './request';
import { IRunRow, IRunsResponse } from './tokens';
import { groupRuns, UNOWNED_GROUP, unownedKind } from './runs';

/** A NeuronCore-ish chip: a square die with pins (drawn here; nothing is fetched). */
export const neuronIcon = new LabIcon({
  name: 'neuron-studio-lab:profiler',
  svgstr:
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
    '<path d="M7 5h10a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H7a2 2 0 0 1-2-2V7a2 2 0 0 1 2-2zm1 3v8h8V8z"/>' +
    '<path d="M9 1h2v3H9zm4 0h2v3h-2zM9 20h2v3H9zm4 0h2v3h-2zM1 9h3v2H1zm0 4h3v2H1zm19-4h3v2h-3zm0 4h3v2h-3z"/>' +
    '<path d="M10 10h4v4h-4z"/></g></svg>'
});

export class ProfilerSidebar extends Widget {
  constructor(
    private _opts: { getNotebookPath: () => string | null; openProfiler: (runId: number | null, path: string | null) => void }
  ) {
    super();
    this.id = 'neuron-studio-sidebar';
    this.addClass('ns-Sidebar');
    this.title.icon = neuronIcon;
    this.title.caption = 'Neuron Profiler: runs of this notebook, imported traces, scripts and jobs';
    const open = el('button', { class: 'jp-mod-styled jp-mod-accept ns-SidebarOpen', text: 'Open Neuron Profiler', attrs: { type: 'button' } });
    open.addEventListener('click', () => this._opts.openProfiler(null, this._path));
    const refresh = el('button', { class: 'jp-mod-styled ns-SidebarRefresh', text: 'Refresh', attrs: { type: 'button' } });
    refresh.addEventListener('click', () => void this.refresh());
    this.node.append(el('h3', { text: 'Neuron Profiler' }), el('div', {}, open, ' ', refresh), this._label, this._list, this._unownedLabel, this._unownedList);
  }

  protected onAfterShow(): void {
    void this.refresh();
  }

  /** The runs of the current notebook and the folder's runs with no notebook (other notebooks' runs: not listed). */
  async refresh(): Promise<void> {
    this._path = this._opts.getNotebookPath() ?? this._path;
    if (!this._path) {
      this._label.textContent = 'Open a notebook that runs %%neuron cells.';
      this._list.replaceChildren();
      return;
    }
    try {
      const data = await requestAPI<IRunsResponse>('runs', { path: this._path });
      const groups = groupRuns(data.runs, this._path);
      const item = (r: IRunRow, origin: string) => {
        const li = el('li', { class: 'ns-SidebarRun', attrs: { 'data-run-id': String(r.id) } },
          el('a', { text: `#${r.id} ${r.name ?? r.mode}`, attrs: { href: '#' } }),
          el('span', { class: 'ns-Muted', text: ` ${origin ? `${origin} · ` : ''}${r.status} · ${fmtNs(r.step_time_ns)}` }));
        li.querySelector('a')!.addEventListener('click', event => {
          event.preventDefault();
          this._opts.openProfiler(r.id, this._path);
        });
        return li;
      };
      this._label.textContent = groups.own.length ? `Runs of ${this._path}:` : `No runs of ${this._path} yet.`;
      this._list.replaceChildren(...groups.own.map(r => item(r, '')));
      this._unownedLabel.textContent = groups.unowned.length ? `${UNOWNED_GROUP}:` : '';
      this._unownedList.replaceChildren(...groups.unowned.map(r => item(r, unownedKind(r))));
    } catch (error) {
      this._label.textContent = `Could not list runs: ${(error as Error).message}`;
    }
  }

  private _path: string | null = null;
  private _label = el('div', { class: 'ns-Muted ns-SidebarLabel' });
  private _list = el('ul', { class: 'ns-SidebarRuns' });
  private _unownedLabel = el('div', { class: 'ns-Muted ns-SidebarLabel' });
  private _unownedList = el('ul', { class: 'ns-SidebarRuns ns-SidebarUnowned' });
}
