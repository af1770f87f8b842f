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
  export const importTraces = 'neuron-studio:import-traces';
  export const openSource = 'neuron-studio:open-source';
  export const insertVariant = 'neuron-studio:insert-variant';
}

export type Engine = 'tensor' | 'vector' | 'scalar' | 'gpsimd' | 'dma';
export const ENGINES: readonly Engine[] = ['tensor', 'vector', 'scalar', 'gpsimd', 'dma'];

export interface IEngineUtilization {
  engine: string;
  utilization: number;
  busy_ns: number;
}

/**
 * An NKI kernel matched to a hot op (profiler/profile_summary.py). Any field may be null: kernels the
 * registry knows only by pattern have no name, `runs_as` kernels of torch-neuronx have no line.
 */
export interface IKernelRef {
  name: string | null;
  /** `runs_as`/`runs`: the kernel executes this op; `candidate`: it could replace it. */
  kind: string | null;
  /** Absolute path (or a path relative to the server root). */
  file: string | null;
  line: number | null;
  /** Modeled saving per profile if the op used this kernel. */
  saving_ns?: number | null;
  /** `op` or `module <path>`: what the kernel would replace. */
  scope?: string | null;
}

/**
 * Where an op was called: `cell-<In number>:<line>` (a notebook cell by its execution count; in a
 * `%%neuron` cell the line counts the body, after the magic line) or `<path>:<line>`.
 */
export type SourceRef = string | null;

export interface IHotOp {
  op: string;
  module: string;
  source: SourceRef;
  /** Per step. */
  device_ns: number;
  share: number | null;
  bound: string;
  why?: string;
  engine?: string;
  count?: number;
  kernel: IKernelRef | null;
}

export interface IOpRow {
  /** Measured time per step (GPU time it launched, or host time) when the table ranks by measured time. */
  measured_ns?: number | null;
  op: string;
  count: number;
  device_ns: number | null;
  host_ns: number;
  flops: number | null;
  bytes: number | null;
  engine: string;
  bound: string;
  share: number;
  /** Launch regions this op ended per step where the user's code decides it (adaptive and compile runs). */
  region_splits?: number | null;
}

/** Where the user's code ends launch regions: the op at its line, per step, what ended them and the fix. */
export interface IRegionSplit {
  reason: string;
  op: string;
  source: string | null;
  per_step: number;
  ended_by: string;
  fix: string;
}

export interface IFallback {
  op: string;
  count: number;
  reason: string;
  time_ns: number | null;
}

/** One occurrence of a host sync, as summaries before version 2 listed them (every occurrence of every step). */
export interface ISyncPoint {
  op: string;
  reason: string;
  source: SourceRef;
  module?: string;
}

/** One place where the host waits (profiler/profile_summary.py `sync_places_block`): a source line, op and reason. */
export interface ISyncPlace {
  op: string;
  reason: string;
  source: SourceRef;
  /** The modules that ran the line (as every view names them). */
  modules: string[];
  /** Occurrences per profiled step. */
  count: number | null;
  /** Host time per step those syncs cost (`time_basis` says modeled or measured); null when not determined. */
  time_ns: number | null;
}

/** The sync places the summary lists (the costliest first) and how many it left out. */
export interface ISyncPlaces {
  places: ISyncPlace[];
  total: number;
  left_out: number;
  /** Occurrences per step of the places left out. */
  left_out_count: number | null;
  time_basis: 'modeled' | 'measured' | null;
}

export interface IRecompile {
  graph: string;
  shape: string;
  /** Why the graph compiled again (profiler/recompile_causes.py CAUSES key: "shapes", "grad_mode", "value", ...). */
  cause?: string;
  /** The cause in words. */
  reason: string;
  /** Dynamo's guard failures as it gave them (TORCH_LOGS=recompiles); plain text. */
  detail?: string;
}

export interface ICost {
  chip: string;
  per_step_usd?: number | null;
  per_1000_steps_usd: number | null;
  per_1m_steps_usd?: number | null;
  h100_per_1m_steps_usd?: number | null;
  h100_per_1000_steps_usd: number | null;
  price_per_hour_usd: number | null;
  h100_price_per_hour_usd: number | null;
  h100_step_time_ns?: number | null;
  modeled?: boolean;
}

/** The runner's diff against an earlier run of the same cell (or `--compare RUN`). */
export interface ICompare {
  run_id: number;
  name?: string | null;
  step_time_before_ns?: number | null;
  step_time_after_ns?: number | null;
  step_time_delta_pct: number | null;
  mfu_before?: number | null;
  ops?: { op: string; before_ns: number; after_ns: number; delta_ns: number; status: string }[];
  /** This run is a what-if row's cell of the compared run: what that row predicted, and this run against it. */
  prediction?: IPrediction | null;
}

/** A what-if row's prediction beside the run of its cell (profiler/analysis/variant_cell.py `prediction_for`). */
export interface IPrediction {
  variant: string;
  step_time_ns: number;
  low_ns: number | null;
  high_ns: number | null;
  measured_ns: number;
  ratio: number;
  /** Inside [low_ns, high_ns]; null when the row stated no range. */
  within: boolean | null;
}

/** What a measured profile was read from, what it does not hold, and what each headline figure is. */
export interface IProvenance {
  measured_from: string | null;
  not_captured: string[];
  /** figure -> measured | derived | modeled | not captured | unavailable */
  figures: Record<string, string>;
  figure_sources: Record<string, string>;
}

/** Per-engine utilization over the step, in bins (`start_ns[i]`..`end_ns[i]`). */
export interface ISummaryTimeline {
  start_ns: number[];
  end_ns: number[];
  [engine: string]: number[];
}

/** profiler.model.calibration.CalibrationSummary of the profiled chip. */
export interface ICalibration {
  chip: string;
  n_rows: number;
  lo: number | null;
  hi: number | null;
  geomean: number | null;
  text: string;
  validated: boolean;
}

/** The payload of `application/vnd.neuron-studio.profile+json` (version 2; older versions are read too). */
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
  /** Modeled runs: step time with the unmeasured assumptions at their low / high plausible values. */
  step_time_range_ns?: [number | null, number | null] | null;
  /** Assumption -> what its range is (names what drives the step-time range). */
  range_drivers?: Record<string, string>;
  /** Geometric-mean error of the model against this chip's published measurements (1.0 = exact). */
  calibration_error?: number | null;
  /** The chip's own calibration: `text` is the statement a badge shows (per chip; "not validated ..." when none). */
  calibration?: ICalibration | null;
  /** The calibration footnote: what it measures (the model against published measurements, not this run's range). */
  calibration_note?: string | null;
  host_time_ns?: number | null;
  /** A measured profile's account of itself (null for modeled runs). */
  provenance?: IProvenance | null;
  mfu: number | null;
  mbu: number | null;
  /** Launches per step (a float: adaptive mode fuses). */
  launches?: number | null;
  steps?: number;
  ops_per_step?: number | null;
  timeline?: ISummaryTimeline | null;
  /** Why there is no timeline (e.g. "timeline not captured: ..." for a summary-only Neuron profile). */
  timeline_note?: string | null;
  /** What the op table ranks by: "modeled device time", or "measured GPU time" / "measured host time". */
  op_table_basis?: string | null;
  /** The whole run's trace at one resolution (the trace viewer's data without a server; viewer/types.ts). */
  trace_view?: unknown;
  engines?: IEngineUtilization[];
  hot_ops?: IHotOp[];
  op_table?: IOpRow[];
  region_splits?: IRegionSplit[];
  badges?: { fallbacks: number; sync_points: number; recompiles: number };
  fallbacks?: IFallback[];
  /** Host syncs grouped per place (version 2 on). */
  sync_places?: ISyncPlaces | null;
  /** Version 1 only (a stored summary or a saved notebook output from before version 2): one row per occurrence. */
  sync_points?: ISyncPoint[];
  recompiles?: IRecompile[];
  cost?: ICost | null;
  compare?: ICompare | null;
  /** Device memory over the profiled steps and the per-chip forecast (emulated runs). */
  memory?: IMemoryBlock | null;
  warnings?: string[];
  /** Multi-rank runs (`neuron-studio run -- torchrun ...`): number of ranks and the merged analysis. */
  ranks?: number;
  ranks_analysis?: IRanksAnalysis | null;
  /** What the hot path ranks by: "modeled device time", "measured GPU time" or "measured host time". */
  hot_basis?: string;
  /** Where an imported trace came from. */
  source?: ITraceSource | null;
  /** Measured GPU figures of an imported CUDA/ROCm trace, and the same job modeled on Trainium. */
  gpu?: IGpuBlock | null;
  /** Where the step time goes (profiler/breakdown_summary.py): parts add up to `step_time_ns`. */
  breakdown?: IBreakdownBlock | null;
  /** The what-if advisor: the recorded ops re-modeled per mode, chip and NKI kernel. */
  what_if?: IWhatIfBlock | null;
}

/** One category of the step: ns and share, or not determined (with the reason in `note`). */
export interface IBreakdownPart {
  key: string;
  label: string;
  ns: number | null;
  share: number | null;
  determined: boolean;
  note?: string | null;
}

/** A change the breakdown implies and the rows that justify it (`tab`: optable | hot | fallbacks | syncs). */
export interface IRecommendation {
  category: string;
  share: number | null;
  text: string;
  tab: string;
  ops: string[];
}

/** The summary's `breakdown` block. */
export interface IBreakdownBlock {
  basis: string;
  step_time_ns: number | null;
  parts: IBreakdownPart[];
  steps: { step: number; step_ns: number | null; parts: Record<string, number | null> }[];
  steps_total?: number;
  recommendations: IRecommendation[];
  notes: string[];
}

/** One variant of the what-if advisor (per step). */
export interface IWhatIfRow {
  variant: string;
  mode: string;
  chip: string;
  kernel: string | null;
  step_time_ns: number | null;
  step_time_low_ns: number | null;
  step_time_high_ns: number | null;
  speedup: number | null;
  mfu: number | null;
  cost_per_1000_steps_usd: number | null;
  cost_per_1m_steps_usd?: number | null;
  /** code | mode | chip | kernel | profile: what the row changes. */
  kind?: string;
  /** The advisor's order (1 = do this first); null for rows that are not advice (`why_not` says why). */
  rank?: number | null;
  /** Where a code change's line goes ("where opt is built; then run the step again"). */
  where?: string | null;
  why_not?: string | null;
  current: boolean;
  basis: string;
  run: string | null;
  /** The whole cell that runs this row: the profiled cell with the row's change (profiler/analysis/variant_cell.py). */
  cell?: string | null;
  /** Graph compiles of the profiled steps (a compile-mode profile that recompiles, and the row padding to buckets). */
  compiles?: number | null;
}

/** The notebook cell a profile ran from (the advisor inserts a row's cell below it). */
export interface IProfiledCell {
  /** The cell as it ran: its `%%neuron` line and body. */
  source: string;
  /** The notebook cell's id (JupyterLab sends it with each execution), if the kernel knew it. */
  id?: string | null;
  /** The notebook's path as the kernel knew it. */
  notebook?: string | null;
}

/** What the Insert buttons of an advisor row ask for. */
export interface IVariantRequest {
  /** The new cell's source. */
  source: string;
  profiled: IProfiledCell;
  /** Run the new cell after inserting it. */
  run: boolean;
}

/** The summary's `what_if` block: rows, the best variant on the profiled chip, or why there are none. */
export interface IWhatIfBlock {
  rows: IWhatIfRow[];
  best?: string | null;
  modeled?: boolean;
  note?: string | null;
  /** The cell the profile ran from; null: not a notebook `%%neuron` cell (CLI run, imported trace, Python API). */
  cell?: IProfiledCell | null;
  /** The profiled steps the re-modeled rows come from when not all (a run above the summary's op limit); empty: all. */
  remodeled_steps?: number[];
  /** Which steps those are and how the rows were scaled, as the table's note; null when every step was re-modeled. */
  scope_note?: string | null;
}

/** The file, rank and device an imported trace names. */
export interface ITraceSource {
  file?: string | null;
  kind?: string | null;
  rank?: number | null;
  world_size?: number | null;
  device?: string | null;
  events?: number | null;
  ops?: number | null;
}

/** GPU time over its span: compute / communication / memory / idle (ns and shares). */
export interface ITemporalBreakdown {
  span_ns: number;
  compute_ns: number;
  communication_ns: number;
  memory_ns: number;
  idle_ns: number;
  compute_share: number;
  communication_share: number;
  memory_share: number;
  idle_share: number;
}

export interface IKernelRow {
  name: string;
  kind: string;
  count: number;
  total_ns: number;
  mean_ns: number;
  share: number;
}

export interface IGpuVsTrainiumOp {
  op: string;
  calls_per_step: number;
  gpu_ns: number;
  trainium_ns: number | null;
  ratio: number | null;
  shapes_recorded: number;
  port: string;
}

export interface IPortIssue {
  op: string;
  count: number;
  reason: string;
  why: string;
  gpu_ns: number;
}

/** The same job on Trainium: measured GPU per op and per step next to the modeled NeuronCore estimate. */
export interface IGpuVsTrainium {
  /** What recorded the device activity, as the trace names it: "GPU", "MTIA", "accelerator". */
  device_kind?: string | null;
  gpu: string | null;
  chip: string;
  steps: number;
  gpu_step_ns: number | null;
  gpu_busy_ns: number | null;
  trainium_step_ns: number | null;
  gpu_per_1000_steps_usd: number | null;
  gpu_per_1m_steps_usd?: number | null;
  trainium_per_1m_steps_usd?: number | null;
  trainium_per_1000_steps_usd: number | null;
  gpu_price_per_hour_usd: number | null;
  gpu_price_source: string;
  trainium_price_per_hour_usd: number | null;
  sized_gpu_share: number;
  ops: IGpuVsTrainiumOp[];
  port_issues: IPortIssue[];
  notes: string[];
  modeled: boolean;
}

export interface IGpuBlock {
  /** What recorded the device activity, as the trace names it: "GPU", "MTIA", "accelerator". */
  device_kind?: string | null;
  activities: number;
  total_ns: number;
  unattributed_ns: number;
  linked_ops: number;
  temporal: ITemporalBreakdown;
  kernels: IKernelRow[];
  vs_trainium?: IGpuVsTrainium | null;
}

/** A storage live at the memory peak. */
export interface IMemoryLive {
  nbytes: number;
  category: string;
  name: string | null;
  dtype: string | null;
  shape: string | null;
  op: string | null;
  module: string | null;
  source: SourceRef;
}

/** A lever of the memory forecast (modeled). */
export interface IMemoryLever {
  key: string;
  title: string;
  peak_bytes: number;
  saving_bytes: number;
  fits: boolean;
  how: string;
  assumption: string;
}

/** One chip at one LNC setting of the memory forecast. */
export interface IChipFit {
  chip: string;
  lnc: number;
  capacity_bytes: number;
  headroom_bytes: number;
  fits: boolean;
  fits_while_profiling: boolean | null;
}

/** The summary's `memory` block (profiler/memory_summary.py). */
export interface IMemoryBlock {
  device: number;
  peak_bytes: number;
  /** Real Trainium: only the measured peak (no timeline, categories, live storages or levers). */
  measured?: boolean;
  peak: { op: string | null; module: string | null; source: SourceRef; phase: string | null; step: number; index: number } | null;
  by_category: Record<string, number>;
  categories: string[];
  /** Binned: each point is the highest of its bin, so the categories add up and the peak is a point. */
  timeline: {
    x_ns: number[];
    x_label: string;
    total: number[];
    step_starts: number[];
    events: number;
    [category: string]: number[] | string | number;
  } | null;
  live: IMemoryLive[];
  live_count: number;
  activations: { module: string; activation_bytes: number; at_peak_bytes: number }[];
  bounds: { lower_bound_bytes: number; allocator_high_water_bytes: number; round_bytes: number; modeled: boolean } | null;
  forecast: {
    chip: string;
    lnc: number;
    capacity_bytes: number;
    headroom_bytes: number;
    fits: boolean;
    profiling_reserve_bytes: number | null;
    fits_while_profiling: boolean | null;
    summary_line: string;
    chips: IChipFit[];
    levers: IMemoryLever[];
    assumptions: string[];
    modeled: boolean;
  };
  notes: string[];
}

/** One rank of a multi-rank run. */
export interface IRankRow {
  rank: number;
  step_time_ns?: number | null;
  modeled_step_time_ns?: number | null;
  mfu?: number | null;
  collectives?: number | null;
  comm_bytes?: number | null;
  wait_ns?: number | null;
  last_arrivals?: number | null;
  /** Per profiled step (over `IRanksAnalysis.steps.per_step` steps); null when the steps are unknown. */
  collectives_per_step?: number | null;
  comm_bytes_per_step?: number | null;
  wait_per_step_ns?: number | null;
  /** Fraction of its collectives it arrived last at. */
  last_share?: number | null;
  overlap_share?: number | null;
  /** Ranks recorded on a GPU: measured shares of their GPU span. */
  gpu_compute_share?: number | null;
  gpu_communication_share?: number | null;
  gpu_memory_share?: number | null;
  gpu_idle_share?: number | null;
}

/** The merged multi-rank analysis: per-rank rows, the straggler and the slowest collective. */
export interface IRanksAnalysis {
  ranks: IRankRow[];
  straggler?: {
    rank: number;
    op: string;
    /** Total over `steps` profiled steps (over the whole capture when `steps` is null). */
    caused_wait_ns: number;
    steps?: number | null;
    wait_per_step_ns?: number | null;
    compute_before_ns?: number | null;
    others_compute_before_ns?: number | null;
    op_before?: string | null;
  } | null;
  slowest_collective?: {
    op: string;
    index: number;
    bytes: number;
    span_ns: number;
    last_rank: number;
  } | null;
  /** The steps the per-step figures are over (`per_step`; null: the steps are unknown, figures are totals). */
  steps?: { common?: number; per_step?: number | null } | null;
  /** The straggler rule's thresholds and the steps they were applied over (null: the per-step floor was not). */
  straggler_rule?: { min_wait_per_step_ns: number; min_wait_share: number; steps: number | null } | null;
  notes?: string[];
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

/** `POST runs/import`: the run a trace file, a folder of per-rank traces or a glob was stored as. */
export interface IImportResponse {
  run_id: number;
  name: string | null;
  ranks: number;
  /** The store it went into, as `runs` names it. */
  store: string;
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

/**
 * Backend · chip · mode for the status bar: the latest profile output of the active notebook when a
 * notebook is tracked, else the last profile rendered anywhere.
 */
export interface INeuronStatusModel {
  /** What the status bar shows. */
  readonly current: IProfilePayload | null;
  /** The last profile rendered anywhere. */
  readonly last: IProfilePayload | null;
  /** Emits when `current` may have changed. */
  readonly changed: ISignal<INeuronStatusModel, IProfilePayload | null>;
  /** Emits each payload the renderer draws (a notebook output changed). */
  readonly rendered: ISignal<INeuronStatusModel, IProfilePayload>;
  /** The renderer drew a payload. */
  update(payload: IProfilePayload): void;
  /**
   * The active notebook and its latest profile output (`null`: it has none); `undefined` when no
   * notebook is active (the last profile seen is shown).
   */
  setNotebook(path: string | undefined, payload: IProfilePayload | null): void;
  /** The notebook whose profile is shown, if any. */
  readonly notebookPath: string | undefined;
}

export class NeuronStatusModel implements INeuronStatusModel {
  get current(): IProfilePayload | null {
    return this._notebookPath === undefined ? this._last : this._notebook;
  }
  get last(): IProfilePayload | null {
    return this._last;
  }
  get notebookPath(): string | undefined {
    return this._notebookPath;
  }
  get changed(): ISignal<INeuronStatusModel, IProfilePayload | null> {
    return this._changed;
  }
  get rendered(): ISignal<INeuronStatusModel, IProfilePayload> {
    return this._rendered;
  }
  update(payload: IProfilePayload): void {
    this._last = payload;
    this._rendered.emit(payload);
    this._changed.emit(this.current);
  }
  setNotebook(path: string | undefined, payload: IProfilePayload | null): void {
    if (path === this._notebookPath && payload === this._notebook) {
      return;
    }
    this._notebookPath = path;
    this._notebook = path === undefined ? null : payload;
    this._changed.emit(this.current);
  }
  private _last: IProfilePayload | null = null;
  private _notebook: IProfilePayload | null = null;
  private _notebookPath: string | undefined = undefined;
  private _changed = new Signal<INeuronStatusModel, IProfilePayload | null>(this);
  private _rendered = new Signal<INeuronStatusModel, IProfilePayload>(this);
}

export const INeuronStatusModel = new Token<INeuronStatusModel>(
  'neuron-studio-lab:INeuronStatusModel',
  'Backend, chip and mode of the active notebook\'s latest Neuron Studio profile.'
);
