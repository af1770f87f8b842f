/**
 * The "Neuron Profiler" main-area panel: the current notebook's runs and the runs with no notebook in its
 * folder's store (imported traces, scripts, jobs; other notebooks' runs when asked for), a run's detail
 * (summary, binned timeline, op page, hot path) and a two-run compare view.
 */
import { InputDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import {
  bar,
  el,
  engineBinsSvg,
  fmtNs,
  fmtPct,
  fmtSignedPct,
  hotOpsTable,
  hotTimeLabel,
  IProfileViewActions,
  kernelLink,
  renderProfile,
  sourceLabel,
  sourceLink,
  table
} from './mime';
import { requestAPI, requestBlob } from './request';
import { groupRuns, UNOWNED_GROUP, unownedKind } from './runs';
import { JobTraceSource, ServerTraceSource } from './viewer/sources';
import { unsizedNote } from './viewer/tab';
import { TraceViewer } from './viewer/viewer';
import { ITraceWindow } from './viewer/types';
import {
  ENGINES,
  IDeviceOp,
  IImportResponse,
  IOpRow,
  IProfilePayload,
  IRunDetail,
  IRunRow,
  IRunsResponse,
  ITimelineResponse
} from './tokens';

const TIMELINE_BINS = 120;
const OPS_PAGE_SIZE = 100;

/** Per-engine utilization heat strips: one row per engine, one rect per bin. */
export function timelineSvg(t: ITimelineResponse): SVGSVGElement {
  // ops on no engine ('none': views) are no track
  const names = [...ENGINES, ...Object.keys(t.engines).filter(e => e !== 'none' && !(ENGINES as readonly string[]).includes(e))];
  return engineBinsSvg(
    names.map(n => [n, t.engines[n] ?? []]),
    i => fmtNs(t.start_ns + i * t.bin_ns),
    `${fmtNs(0)} … ${fmtNs(t.end_ns - t.start_ns)} (${t.total_ops.toLocaleString()} ops, ${t.cores} core${t.cores === 1 ? '' : 's'})`,
    18
  );
}

function opsPageTable(rows: IDeviceOp[]): HTMLTableElement {
  return table(
    ['#', 'Op', 'Engine', 'Core', 'Start', 'Duration', 'Bound', 'Module', 'Source'],
    rows.map(r => [
      String(r.seq),
      String(r.name),
      String(r.engine),
      String(r.core),
      fmtNs(r.start_ns),
      fmtNs(r.end_ns - r.start_ns),
      String(r.bound ?? ''),
      String(r.module ?? ''),
      sourceLabel(r.source)
    ]),
    'ns-OpsPage'
  );
}

/** Per-op device time deltas between two op tables (b relative to a), largest change first. */
export function opDeltas(a: IOpRow[], b: IOpRow[]): { op: string; a: number; b: number; delta: number }[] {
  const sum = (rows: IOpRow[]) => {
    const m = new Map<string, number>();
    for (const r of rows) {
      m.set(String(r.op), (m.get(String(r.op)) ?? 0) + (Number(r.device_ns) || 0));
    }
    return m;
  };
  const ma = sum(a);
  const mb = sum(b);
  const ops = new Set([...ma.keys(), ...mb.keys()]);
  return [...ops]
    .map(op => ({ op, a: ma.get(op) ?? 0, b: mb.get(op) ?? 0, delta: (mb.get(op) ?? 0) - (ma.get(op) ?? 0) }))
    .sort((x, y) => Math.abs(y.delta) - Math.abs(x.delta));
}

export class ProfilerPanel extends Widget {
  constructor(
    private _opts: { getNotebookPath: () => string | null; actions: IProfileViewActions }
  ) {
    super();
    this.id = 'neuron-studio-profiler';
    this.addClass('ns-ProfilerPanel');
    this.title.label = 'Neuron Profiler';
    this.title.closable = true;
    const refresh = el('button', { class: 'jp-mod-styled ns-Refresh', text: 'Refresh', attrs: { type: 'button' } });
    refresh.addEventListener('click', () => void this.refresh());
    this._importButton.addEventListener('click', () => void this.importTraces());
    this._compareButton.addEventListener('click', () => void this.compareSelected());
    this._showAll.type = 'checkbox';
    this._showAll.addEventListener('change', () => this._renderList());
    this.node.append(
      el(
        'div',
        { class: 'ns-PanelToolbar' },
        el('b', { text: 'Neuron Profiler' }),
        this._pathLabel,
        el('label', { class: 'ns-ShowAll' }, this._showAll, this._showAllText),
        refresh,
        this._importButton,
        this._compareButton
      ),
      this._message,
      el('div', { class: 'ns-PanelBody' }, this._list, this._detail)
    );
    this._updateCompareButton();
  }

  get notebookPath(): string | null {
    return this._path;
  }

  /** The view actions, with op sources resolved in this panel's notebook. */
  private get _actions(): IProfileViewActions {
    const actions = this._opts.actions;
    return {
      ...actions,
      openProfiler: undefined, // the panel is open: its profile views do not offer to open it again
      openSource: (source, origin) => actions.openSource?.(source, origin, this._path, this._cellSource),
      insertVariant: actions.insertVariant
        ? (request, origin) => actions.insertVariant!(request, origin, this._path)
        : undefined
    };
  }

  /** Reload the runs of the current notebook's store. */
  async refresh(): Promise<void> {
    this._path = this._opts.getNotebookPath() ?? this._path;
    if (!this._path) {
      this.title.label = 'Neuron Profiler';
      this._setMessage('Open a notebook that has run %%neuron cells, then refresh.');
      this._list.replaceChildren();
      return;
    }
    try {
      const data = await requestAPI<IRunsResponse>('runs', { path: this._path });
      this._runs = data.runs;
      this._store = data.store;
      this._renderList();
    } catch (error) {
      this._setMessage(`Could not list runs: ${(error as Error).message}`);
    }
  }

  /**
   * Store traces recorded elsewhere as a run of this panel's store and show it: `target` is a trace file, a
   * folder of per-rank traces or a glob, relative to the server root (asked for when not given). The server
   * runs `neuron-studio import` on it; a job's ranks are read by worker processes, so a big job takes minutes.
   */
  async importTraces(target?: string, name?: string): Promise<IImportResponse | null> {
    if (!this._path) {
      await this.refresh();
    }
    if (!this._path) {
      return null;
    }
    if (target === undefined) {
      const answer = await InputDialog.getText({
        title: 'Import traces',
        label: 'A trace file (.json, .json.gz), a folder of per-rank traces or run folders, or a glob; relative to the server root',
        placeholder: 'traces/job-42/   or   traces/*rank*.pt.trace.json.gz',
        okLabel: 'Import'
      });
      if (!answer.button.accept || !answer.value?.trim()) {
        return null;
      }
      target = answer.value.trim();
    }
    this._importButton.disabled = true;
    this._setMessage(`Importing ${target}… (each rank is read by a worker process: a big job takes minutes)`);
    try {
      const done = await requestAPI<IImportResponse>(
        'runs/import',
        {},
        { method: 'POST', body: JSON.stringify({ path: this._path, target, ...(name ? { name } : {}) }) }
      );
      await this.refresh(); // an imported run belongs to no notebook: listed in that group
      await this.showRun(done.run_id);
      return done;
    } catch (error) {
      this._setMessage(`Could not import ${target}: ${(error as Error).message}`);
      return null;
    } finally {
      this._importButton.disabled = false;
    }
  }

  /** Show one run's detail. */
  async showRun(runId: number): Promise<void> {
    if (!this._path) {
      return;
    }
    this._current = runId;
    this._highlight();
    this._detail.replaceChildren(el('div', { class: 'ns-Loading', text: `Loading run #${runId}…` }));
    try {
      const detail = await requestAPI<IRunDetail>(`runs/${runId}`, { path: this._path });
      if (this._current !== runId) {
        return;
      }
      const run = detail.run;
      this._cellSource = run.cell_source ?? null;
      const timeline = el('div', { class: 'ns-TimelineBox' });
      const opsBox = el('div', { class: 'ns-OpsBox' });
      const parts: (HTMLElement | null)[] = [
        el(
          'div',
          { class: 'ns-DetailHeader' },
          el('h3', { text: `${run.name ?? 'run'} — #${run.id}` }),
          el('span', { class: 'ns-Tag', text: run.status }),
          detail.previous_run !== null
            ? el('span', { class: 'ns-Tag', text: `previous run of this cell: #${detail.previous_run}` })
            : null
        ),
        el('pre', { class: 'ns-CellSource', text: run.cell_source })
      ];
      if (run.summary) {
        parts.push(renderProfile(run.summary, this._actions));
      } else {
        parts.push(el('div', { text: 'This run has no summary.' }));
      }
      const trace = detail.tables.includes('device_ops') ? this._traceViewer(runId, run.summary ?? null) : null;
      if (detail.tables.includes('job_ranks')) {
        // a many-rank run: the whole job on its aligned clock first, then the first rank's own trace
        parts.push(el('h4', { text: `Job timeline (${run.ranks} ranks)` }), this._perfettoExport(runId), this._jobViewer(runId));
      }
      if (trace) {
        parts.push(el('h4', { text: detail.tables.includes('job_ranks') ? 'Trace (first rank)' : 'Trace' }), trace.node);
      }
      parts.push(el('h4', { text: 'Engine utilization' }), timeline, el('h4', { text: 'Device ops' }), opsBox);
      if (run.summary?.hot_ops?.length) {
        parts.push(
          el('h4', { text: 'Hot path' }),
          el('div', { class: 'ns-PanelHotPath' }, hotOpsTable(run.summary.hot_ops, this._actions, hotTimeLabel(run.summary)))
        );
      }
      this._detail.replaceChildren(...parts.filter((p): p is HTMLElement => p !== null));
      if (detail.tables.includes('device_ops')) {
        // the trace's first server answer first: on a cold server both would read the table at once, sharing
        // its two cores (a hidden panel does not load its trace: then wait a few seconds at most)
        if (trace) {
          const viewer = trace.viewer;
          await Promise.race([viewer.settled, new Promise(r => setTimeout(r, 3000))]);
          if (viewer.loading) {
            await viewer.settled;
          }
        }
        await this._loadTimeline(runId, timeline, opsBox, 0);
      } else {
        timeline.textContent = 'No device trace stored for this run.';
      }
    } catch (error) {
      this._detail.replaceChildren(el('div', { class: 'ns-Error', text: (error as Error).message }));
    }
  }

  /** A many-rank run's job timeline: a lane per rank on the aligned clock, ranks expandable. */
  private _jobViewer(runId: number): HTMLElement {
    const actions = this._actions;
    const viewer = new TraceViewer(new JobTraceSource(runId, this._path!), {
      sourceLink: src => sourceLink(src, actions),
      kernelLink: () => null,
      note: 'Each rank\'s measured host timeline, aligned on the job\'s clock; lines link each collective across ranks (red: the rank that arrived last).'
    });
    return el('div', { class: 'ns-TraceBox ns-PanelTrace ns-JobTrace' }, viewer.node);
  }

  /**
   * "Open in Perfetto" for a whole job: the server writes every rank on the aligned clock, collectives linked
   * as flows, into one gzip Chrome trace, downloaded here. The Perfetto UI itself is a web app this extension
   * does not bundle (it runs offline), so the file is opened there by the user.
   */
  private _perfettoExport(runId: number): HTMLElement {
    const button = el('button', {
      class: 'jp-mod-styled ns-PerfettoExport',
      text: 'Download for Perfetto',
      attrs: { type: 'button', title: 'The whole job as one Chrome trace (.json.gz): every rank on the aligned clock, collectives linked' }
    });
    const file = `neuron-studio-run-${runId}.json.gz`;
    const note = el('span', {
      class: 'ns-PerfettoNote',
      text: `${file}: every rank on the aligned clock, collectives as flows. Open it in the Perfetto UI (ui.perfetto.dev or one you host); Perfetto is not bundled here.`
    });
    button.addEventListener('click', async () => {
      button.disabled = true;
      note.textContent = 'Exporting the whole job (every rank is read again; a big job takes minutes)…';
      try {
        const blob = await requestBlob(`runs/${runId}/perfetto`, { path: this._path! });
        const url = URL.createObjectURL(blob);
        const link = el('a', { attrs: { href: url, download: file } });
        document.body.appendChild(link);
        link.click();
        link.remove();
        setTimeout(() => URL.revokeObjectURL(url), 60_000);
        note.textContent = `Downloaded ${file} (${(blob.size / 1e6).toFixed(1)} MB gzip). Open it in the Perfetto UI.`;
      } catch (error) {
        note.textContent = `Could not export the job: ${(error as Error).message}`;
      } finally {
        button.disabled = false;
      }
    });
    return el('div', { class: 'ns-PerfettoBar' }, button, note);
  }

  /** The trace viewer on the stored run, served level-of-detail per window by the server. */
  private _traceViewer(runId: number, summary: IProfilePayload | null): { node: HTMLElement; viewer: TraceViewer } {
    const actions = this._actions;
    const overview = (summary?.trace_view ?? null) as ITraceWindow | null;
    const viewer = new TraceViewer(new ServerTraceSource(runId, this._path!), {
      // drawn while the server reads the run's table for its first answer
      overview,
      note: unsizedNote(overview),
      sourceLink: src => sourceLink(src, actions),
      kernelLink: name => {
        const hot = summary?.hot_ops?.find(h => h.op === name && h.kernel);
        return hot?.kernel ? kernelLink(hot.kernel, actions) : null;
      }
    });
    return { node: el('div', { class: 'ns-TraceBox ns-PanelTrace' }, viewer.node), viewer };
  }

  /** Compare the two selected runs (older first). */
  async compareSelected(): Promise<void> {
    const ids = [...this._selected].sort((a, b) => a - b);
    if (ids.length !== 2 || !this._path) {
      return;
    }
    this._current = null;
    this._highlight();
    this._detail.replaceChildren(el('div', { class: 'ns-Loading', text: 'Comparing…' }));
    try {
      const [a, b] = await Promise.all(ids.map(id => requestAPI<IRunDetail>(`runs/${id}`, { path: this._path! })));
      this._detail.replaceChildren(this._compareView(a, b));
    } catch (error) {
      this._detail.replaceChildren(el('div', { class: 'ns-Error', text: (error as Error).message }));
    }
  }

  private _compareView(a: IRunDetail, b: IRunDetail): HTMLElement {
    const sa = a.run.summary;
    const sb = b.run.summary;
    const stepA = sa?.step_time_ns ?? a.run.step_time_ns;
    const stepB = sb?.step_time_ns ?? b.run.step_time_ns;
    const mfuA = sa?.mfu ?? a.run.mfu;
    const mfuB = sb?.mfu ?? b.run.mfu;
    const stepDelta = stepA && stepB ? ((stepB - stepA) / stepA) * 100 : null;
    const mfuDelta = mfuA !== null && mfuA !== undefined && mfuB !== null && mfuB !== undefined ? (mfuB - mfuA) * 100 : null;
    const deltas = opDeltas(sa?.op_table ?? [], sb?.op_table ?? []);
    return el(
      'div',
      { class: 'ns-Compare' },
      el('h3', { text: `Compare #${a.run.id} → #${b.run.id}` }),
      table(
        ['', `#${a.run.id} ${a.run.name ?? ''}`, `#${b.run.id} ${b.run.name ?? ''}`, 'Δ'],
        [
          ['Step time', fmtNs(stepA), fmtNs(stepB), el('span', { class: 'ns-Delta', text: fmtSignedPct(stepDelta) })],
          ['MFU', fmtPct(mfuA), fmtPct(mfuB), el('span', { class: 'ns-Delta', text: mfuDelta === null ? '—' : `${mfuDelta > 0 ? '+' : ''}${mfuDelta.toFixed(1)} pts` })],
          ['Mode', a.run.mode, b.run.mode, ''],
          ['Chip', a.run.chip, b.run.chip, '']
        ],
        'ns-CompareHeadline'
      ),
      el('h4', { text: 'Device time per op' }),
      deltas.length
        ? table(
            ['Op', `#${a.run.id}`, `#${b.run.id}`, 'Δ'],
            deltas.map(d => [d.op, fmtNs(d.a), fmtNs(d.b), `${d.delta > 0 ? '+' : ''}${fmtNs(d.delta)}`]),
            'ns-CompareOps'
          )
        : el('div', { text: 'Neither run has an op table.' })
    );
  }

  private async _loadTimeline(runId: number, box: HTMLElement, opsBox: HTMLElement, page: number): Promise<void> {
    const t = await requestAPI<ITimelineResponse>(`runs/${runId}/timeline`, {
      path: this._path!,
      bins: TIMELINE_BINS,
      page,
      page_size: OPS_PAGE_SIZE
    });
    if (this._current !== runId) {
      return;
    }
    if (page === 0) {
      const avg = (xs: number[]) => (xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : 0);
      box.replaceChildren(
        timelineSvg(t),
        el('div', { class: 'ns-TimelineAverages' }, ...Object.entries(t.engines).map(([e, xs]) => bar(e, avg(xs))))
      );
    }
    const ops = t.ops!;
    const prev = el('button', { class: 'jp-mod-styled', text: '‹ Prev', attrs: { type: 'button' } });
    const next = el('button', { class: 'jp-mod-styled', text: 'Next ›', attrs: { type: 'button' } });
    prev.disabled = ops.page <= 0;
    next.disabled = ops.page + 1 >= ops.pages;
    prev.addEventListener('click', () => void this._loadTimeline(runId, box, opsBox, ops.page - 1));
    next.addEventListener('click', () => void this._loadTimeline(runId, box, opsBox, ops.page + 1));
    opsBox.replaceChildren(
      el('div', { class: 'ns-Pager' }, prev, el('span', { text: `page ${ops.page + 1} of ${Math.max(1, ops.pages)} (${ops.total.toLocaleString()} ops)` }), next),
      opsPageTable(ops.rows)
    );
  }

  private _renderList(): void {
    const groups = groupRuns(this._runs, this._path);
    const others = groups.others.length;
    const all = this._showAll.checked && others > 0;
    this._showAllText.textContent = ` also the ${others} run${others === 1 ? '' : 's'} of other notebooks in this folder`;
    (this._showAll.parentElement as HTMLElement).hidden = others === 0;
    const name = this._path ? this._path.split('/').pop() : null;
    // the title, the label and the groups say the same thing: this notebook's runs, then the folder's runs that
    // belong to no notebook, then (when asked for) the other notebooks' runs
    this.title.label = !name ? 'Neuron Profiler' : all ? `Neuron Profiler: all runs next to ${name}` : `Neuron Profiler: ${name}`;
    const unowned = groups.unowned.length;
    this._pathLabel.textContent = !this._path
      ? 'no notebook selected'
      : all
        ? `all runs in ${this._store ?? 'the store'} (next to ${this._path})`
        : `runs of ${this._path}${unowned ? ` and the ${unowned} run${unowned === 1 ? '' : 's'} with no notebook in this folder` : ''}`;
    this.title.caption = this._pathLabel.textContent;
    const shown = groups.own.length + unowned + (all ? others : 0);
    this._setMessage(
      shown ? '' : `No runs of ${this._path} yet${others ? ` (${others} of other notebooks in this folder)` : ''}.`
    );
    const heads = ['', 'Run', 'Name', 'Cell', 'Mode', 'Chip', 'Ranks', 'Status', 'Step', 'MFU'];
    const sections: [string, string, IRunRow[], (run: IRunRow) => string][] = [
      ['own', `This notebook (${name ?? ''})`, groups.own, () => ''],
      ['unowned', UNOWNED_GROUP, groups.unowned, unownedKind],
      ...(all ? [['others', 'Other notebooks in this folder', groups.others, (run: IRunRow) => run.notebook ?? '']] as [string, string, IRunRow[], (run: IRunRow) => string][] : [])
    ];
    // the notebook's own runs alone need no heading (the label names them); with other groups, each is headed
    const headed = unowned > 0 || all;
    const bodies = sections
      .filter(([key, , runs]) => runs.length || (key === 'own' && headed))
      .map(([key, title, runs, origin]) =>
        el(
          'tbody',
          { class: 'ns-RunGroup', attrs: { 'data-group': key } },
          headed
            ? el('tr', { class: 'ns-RunGroupHead' }, el('th', { attrs: { colspan: String(heads.length) }, text: runs.length ? `${title} · ${runs.length}` : `${title}: no runs yet` }))
            : null,
          ...runs.map(run => this._runRow(run, origin(run)))
        )
      );
    const head = el('tr', {}, ...heads.map(h => el('th', { text: h })));
    this._list.replaceChildren(el('table', { class: 'ns-Table ns-RunList' }, el('thead', {}, head), ...bodies));
    this._highlight();
  }

  /** One run's row; `origin` (where a run of no notebook or another notebook comes from) leads its Cell column. */
  private _runRow(run: IRunRow, origin: string): HTMLElement {
    const check = el('input', { attrs: { type: 'checkbox', 'aria-label': `select run ${run.id}` } });
    check.checked = this._selected.has(run.id);
    check.addEventListener('click', event => event.stopPropagation());
    check.addEventListener('change', () => {
      if (check.checked) {
        this._selected.add(run.id);
      } else {
        this._selected.delete(run.id);
      }
      this._updateCompareButton();
    });
    const firstLine = (run.cell_source ?? '').split('\n').find(l => l.trim() && !l.trim().startsWith('%%')) ?? '';
    const tr = el(
      'tr',
      { class: 'ns-RunRow', attrs: { 'data-run-id': String(run.id), 'data-notebook': run.notebook ?? '' } },
      el('td', {}, check),
      el('td', { text: `#${run.id}` }),
      el('td', { class: 'ns-RunName', text: run.name ?? '', title: run.name ?? '' }),
      el(
        'td',
        { class: 'ns-CellPreview', title: run.cell_source },
        origin ? el('span', { class: 'ns-RunOrigin', text: origin }) : null,
        origin && firstLine ? ' ' : null,
        firstLine.slice(0, 60)
      ),
      el('td', { text: run.mode }),
      el('td', { text: run.chip }),
      el('td', { class: 'ns-Ranks', text: run.ranks > 1 ? `${run.ranks} ranks` : '1' }),
      el('td', { class: `ns-Status-${run.status}`, text: run.status }),
      el('td', { text: fmtNs(run.step_time_ns) }),
      el('td', { text: fmtPct(run.mfu) })
    );
    tr.addEventListener('click', () => void this.showRun(run.id));
    return tr;
  }

  private _highlight(): void {
    this._list.querySelectorAll('tr.ns-RunRow').forEach(tr => {
      tr.classList.toggle('ns-mod-selected', tr.getAttribute('data-run-id') === String(this._current));
    });
  }

  private _updateCompareButton(): void {
    this._compareButton.disabled = this._selected.size !== 2;
    this._compareButton.textContent = `Compare (${this._selected.size}/2)`;
  }

  private _setMessage(text: string): void {
    this._message.textContent = text;
    this._message.hidden = !text;
  }

  private _path: string | null = null;
  private _store: string | null = null;
  private _showAll = el('input', { class: 'ns-ShowAllRuns', attrs: { 'aria-label': 'show the runs of other notebooks' } });
  private _showAllText = el('span', {});
  private _cellSource: string | null = null;
  private _runs: IRunRow[] = [];
  private _selected = new Set<number>();
  private _current: number | null = null;
  private _pathLabel = el('span', { class: 'ns-PathLabel' });
  private _message = el('div', { class: 'ns-Message' });
  private _list = el('div', { class: 'ns-RunListBox' });
  private _detail = el('div', { class: 'ns-Detail' });
  private _compareButton = el('button', { class: 'jp-mod-styled ns-Compare-button', attrs: { type: 'button' } });
  private _importButton = el('button', {
    class: 'jp-mod-styled ns-Import-button',
    text: 'Import traces…',
    attrs: { type: 'button', title: 'Store a trace file, a folder of per-rank traces or a glob as a run of this store' }
  });
}
