/**
 * Public tokens, command ids and wire types of the Neuron Studio extension.
 */
import { Token } from '@lumino/coreutils';
import { ISignal, Signal } from '@lumino/signaling';

/** The MIME type of the profile summary the `%%neuron` magic displays. */
export const PROFILE_MIME = 'application/vnd.neuron-studio.profile+json';

export namespace CommandIDs {
  export const openKernel = 'neuron-studio:open-kernel';
  export const openProfiler = 'neuron-studio:open-profiler';
}

export type Engine = 'tensor' | 'vector' | 'scalar' | 'gpsimd' | 'dma';
export const ENGINES: readonly Engine[] = ['tensor', 'vector', 'scalar', 'gpsimd', 'dma'];

export interface IEngineUtilization {
  engine: string;
  utilization: number;
  busy_ns: number;
}

export interface IKernelRef {
  name: string;
  /** `runs`: the kernel executes this op; `candidate`: it could replace it. */
  kind: string;
  file: string;
  line: number;
  saving_ns?: number | null;
}

export interface IHotOp {
  op: string;
  module: string;
  source: string;
  device_ns: number;
  share: number;
  bound: string;
  why?: string;
  kernel: IKernelRef | null;
}

export interface IOpRow {
  op: string;
  count: number;
  device_ns: number;
  host_ns: number;
  flops: number;
  bytes: number;
  engine: string;
  bound: string;
  share: number;
}

export interface IFallback {
  op: string;
  count: number;
  reason: string;
  time_ns: number;
}

export interface ISyncPoint {
  op: string;
  reason: string;
  source: string;
}

export interface IRecompile {
  graph: string;
  shape: string;
  reason: string;
}

export interface ICost {
  chip: string;
  per_1000_steps_usd: number;
  h100_per_1000_steps_usd: number;
  price_per_hour_usd: number;
  h100_price_per_hour_usd: number;
}

/** The payload of `application/vnd.neuron-studio.profile+json` (version 1). */
export interface IProfilePayload {
  version: number;
  run_id: number | null;
  name: string | null;
  cell_key?: string;
  notebook?: string | null;
  mode: string;
  chip: string;
  backend: string;
  modeled: boolean;
  status: string;
  step_time_ns: number | null;
  host_time_ns?: number | null;
  mfu: number | null;
  mbu: number | null;
  launches?: number;
  steps?: number;
  engines?: IEngineUtilization[];
  hot_ops?: IHotOp[];
  op_table?: IOpRow[];
  badges?: { fallbacks: number; sync_points: number; recompiles: number };
  fallbacks?: IFallback[];
  sync_points?: ISyncPoint[];
  recompiles?: IRecompile[];
  cost?: ICost | null;
  compare?: { run_id: number; step_time_delta_pct: number } | null;
  warnings?: string[];
}

/** A row of `GET neuron-studio/runs`. */
export interface IRunRow {
  id: number;
  name: string | null;
  cell_key: string;
  cell_source: string;
  notebook: string | null;
  options: Record<string, unknown>;
  mode: string;
  chip: string;
  backend: string;
  status: 'ok' | 'error' | 'interrupted' | 'running';
  started_at: number;
  ended_at: number | null;
  wall_s: number | null;
  step_time_ns: number | null;
  mfu: number | null;
  ranks: number;
  parent_run: number | null;
}

export interface IRunsResponse {
  runs: IRunRow[];
  store: string | null;
}

export interface IRunDetail {
  run: IRunRow & { summary: IProfilePayload | null };
  tables: string[];
  previous_run: number | null;
}

export interface IDeviceOp {
  seq: number;
  name: string;
  core: number;
  engine: string;
  start_ns: number;
  end_ns: number;
  flops: number;
  bytes_read: number;
  bytes_written: number;
  bound: string;
  module: string;
  source: string;
}

export interface ITimelineResponse {
  run_id: number;
  start_ns: number;
  end_ns: number;
  bins: number;
  bin_ns: number;
  cores: number;
  engines: Record<string, number[]>;
  total_ops: number;
  ops?: {
    page: number;
    page_size: number;
    total: number;
    pages: number;
    rows: IDeviceOp[];
  };
}

export interface IKernelSourceResponse {
  path: string | null;
  line: number;
  lines: number;
  in_root: boolean;
  name?: string;
  source?: string;
}

/** Backend · chip · mode of the last profile rendered; the status bar shows it. */
export interface INeuronStatusModel {
  readonly current: IProfilePayload | null;
  readonly changed: ISignal<INeuronStatusModel, IProfilePayload | null>;
  update(payload: IProfilePayload): void;
}

export class NeuronStatusModel implements INeuronStatusModel {
  get current(): IProfilePayload | null {
    return this._current;
  }
  get changed(): ISignal<INeuronStatusModel, IProfilePayload | null> {
    return this._changed;
  }
  update(payload: IProfilePayload): void {
    this._current = payload;
    this._changed.emit(payload);
  }
  private _current: IProfilePayload | null = null;
  private _changed = new Signal<INeuronStatusModel, IProfilePayload | null>(this);
}

export const INeuronStatusModel = new Token<INeuronStatusModel>(
  'neuron-studio-lab:INeuronStatusModel',
  'The backend, chip and mode of the last Neuron Studio profile rendered.'
);
