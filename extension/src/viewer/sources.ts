/**
 * The viewer's two data sources: the Jupyter server's level-of-detail routes (a stored run), and the
 * profile summary's whole-run overview (a saved notebook's output, no server or no stored run).
 */
import { requestAPI } from '../request';
import { ITraceOpDetail, ITraceSearch, ITraceSource, ITraceWindow } from './types';

/** A stored run, served in windows by `runs/<id>/trace`. */
export class ServerTraceSource implements ITraceSource {
  readonly levelOfDetail = true;

  constructor(
    private _runId: number,
    private _notebookPath: string
  ) {}

  window(startNs: number | undefined, endNs: number | undefined, widthPx: number): Promise<ITraceWindow> {
    return requestAPI<ITraceWindow>(`runs/${this._runId}/trace`, {
      path: this._notebookPath,
      start_ns: startNs === undefined ? undefined : Math.floor(startNs),
      end_ns: endNs === undefined ? undefined : Math.ceil(endNs),
      width_px: Math.max(16, Math.min(8192, Math.round(widthPx)))
    });
  }

  op(seq: number): Promise<ITraceOpDetail> {
    return requestAPI<ITraceOpDetail>(`runs/${this._runId}/trace/op`, { path: this._notebookPath, seq });
  }

  search(query: string): Promise<ITraceSearch> {
    return requestAPI<ITraceSearch>(`runs/${this._runId}/trace/search`, { path: this._notebookPath, q: query });
  }
}

/**
 * A many-rank run's job timeline, served by `runs/<id>/job`: a lane per rank (its activity) on the job's
 * aligned clock; ranks in `expanded` come as their own host lanes. Search reads every rank's ops.
 */
export class JobTraceSource implements ITraceSource {
  readonly levelOfDetail = true;
  readonly expanded = new Set<number>();

  constructor(
    private _runId: number,
    private _notebookPath: string,
    private _maxExpanded = 8
  ) {}

  toggleRank(rank: number): void {
    if (this.expanded.has(rank)) {
      this.expanded.delete(rank);
    } else if (this.expanded.size < this._maxExpanded) {
      this.expanded.add(rank);
    }
  }

  window(startNs: number | undefined, endNs: number | undefined, widthPx: number): Promise<ITraceWindow> {
    return requestAPI<ITraceWindow>(`runs/${this._runId}/job`, {
      path: this._notebookPath,
      start_ns: startNs === undefined ? undefined : Math.floor(startNs),
      end_ns: endNs === undefined ? undefined : Math.ceil(endNs),
      width_px: Math.max(16, Math.min(8192, Math.round(widthPx))),
      expand: [...this.expanded].sort((a, b) => a - b).join(',')
    });
  }

  op(seq: number): Promise<ITraceOpDetail> {
    return requestAPI<ITraceOpDetail>(`runs/${this._runId}/job/op`, {
      path: this._notebookPath,
      seq,
      expand: [...this.expanded].sort((a, b) => a - b).join(',')
    });
  }

  /** Ops of every rank by name, earliest on the aligned clock first, each on the lane it is drawn on. */
  async search(query: string): Promise<ITraceSearch> {
    const found = await requestAPI<ITraceSearch & { unsearched_ranks: number[] }>(`runs/${this._runId}/job/search`, {
      path: this._notebookPath,
      q: query,
      expand: [...this.expanded].sort((a, b) => a - b).join(',')
    });
    const missing = found.unsearched_ranks ?? [];
    return {
      ...found,
      note: missing.length
        ? `not searched: rank${missing.length === 1 ? '' : 's'} ${missing.join(', ')} (no stored timeline)`
        : undefined
    };
  }
}

/** The summary's overview: one resolution for the whole run; zoom magnifies it. */
export class OverviewTraceSource implements ITraceSource {
  readonly levelOfDetail = false;

  constructor(private _overview: ITraceWindow) {}

  window(): Promise<ITraceWindow> {
    return Promise.resolve(this._overview);
  }

  op(seq: number): Promise<ITraceOpDetail> {
    const o = this._overview;
    for (const lane of o.lanes) {
      const i = lane.seq.indexOf(seq);
      if (i >= 0) {
        const info = o.ops?.[String(seq)] ?? {};
        const isHost = lane.kind === 'host';
        return Promise.resolve({
          op: {
            ...info,
            seq,
            name: o.names[lane.name[i]] ?? 'op',
            start_ns: lane.start[i] + o.origin_ns,
            end_ns: lane.end[i] + o.origin_ns
          },
          lane: isHost ? null : lane.id,
          host_lane: isHost ? lane.id : null
        });
      }
    }
    return Promise.reject(new Error(`op ${seq} is merged into a box in this overview`));
  }

  search(query: string): Promise<ITraceSearch> {
    const q = query.trim().toLowerCase();
    const o = this._overview;
    const results = [];
    for (const lane of o.lanes) {
      if (lane.kind === 'host') {
        continue;
      }
      for (let i = 0; i < lane.seq.length; i++) {
        const name = lane.name[i] >= 0 ? o.names[lane.name[i]] : '';
        if (lane.seq[i] >= 0 && name.toLowerCase().includes(q)) {
          results.push({ seq: lane.seq[i], name, lane: lane.id, start: lane.start[i], end: lane.end[i] });
        }
      }
    }
    results.sort((a, b) => a.start - b.start);
    return Promise.resolve({ total: results.length, results: results.slice(0, 200) });
  }
}

/**
 * A profile output's source: the stored run through the server when the output's notebook and run are
 * known and the server answers, else the summary's overview (a saved notebook opened without the run store).
 */
export class ProfileTraceSource implements ITraceSource {
  constructor(
    private _overview: ITraceWindow | null,
    private _server: () => ServerTraceSource | null
  ) {}

  private _fallback: OverviewTraceSource | null = null;

  get levelOfDetail(): boolean {
    return this._chosen?.levelOfDetail ?? false;
  }

  async window(startNs: number | undefined, endNs: number | undefined, widthPx: number): Promise<ITraceWindow> {
    if (!this._chosen) {
      const server = this._server();
      if (server) {
        try {
          const answer = await server.window(startNs, endNs, widthPx);
          this._chosen = server;
          return answer;
        } catch {
          // the run is not in this server's store (moved notebook, other machine): the overview it is
        }
      }
      if (!this._overview) {
        throw new Error('this profile carries no trace overview and its run is not in the store next to the notebook');
      }
      this._chosen = new OverviewTraceSource(this._overview);
    }
    return this._chosen.window(startNs, endNs, widthPx);
  }

  /** Until the first window is in, what is drawn is the stored overview: a click or a search reads that. */
  private get _current(): ITraceSource | null {
    return this._chosen ?? (this._overview ? (this._fallback ??= new OverviewTraceSource(this._overview)) : null);
  }

  op(seq: number): Promise<ITraceOpDetail> {
    const src = this._current;
    return src ? src.op(seq) : Promise.reject(new Error('the trace is not loaded yet'));
  }

  search(query: string): Promise<ITraceSearch> {
    const src = this._current;
    return src ? src.search(query) : Promise.reject(new Error('the trace is not loaded yet'));
  }

  private _chosen: ITraceSource | null = null;
}
