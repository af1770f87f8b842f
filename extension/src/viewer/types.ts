/**
 * Wire types of the trace viewer (the server's `runs/<id>/trace*` routes and the summary's `trace_view`)
 * and the one interface the viewer reads data through, so the panel (server, level of detail per window)
 * and a saved notebook's output (the summary's whole-run overview, no server) share one viewer.
 */

/** One lane's boxes for a window; times are ns relative to the window answer's `origin_ns`. */
export interface ITraceLane {
  id: string;
  label: string;
  kind: 'host' | 'device' | string;
  core: number | null;
  track: string;
  /** Ops the lane holds in the whole run. */
  total: number;
  start: number[];
  end: number[];
  /** Ops merged into each box (1: the box is one op). */
  count: number[];
  /** Busy ns of each box inside the window. */
  busy: number[];
  /** The op's seq for a one-op box, else -1. */
  seq: number[];
  /** Index into `names` for a one-op box, else -1. */
  name: number[];
  /** Job view: the rank the lane belongs to, and whether it is the straggler. */
  rank?: number;
  straggler?: boolean;
  /** A core's launch-region lane (kind 'regions'): the region of a one-region box (key of `regions`), else -1. */
  region?: number[];
  /** Regions in each box that the user's code ended (an in-place op, a host read...). */
  split?: number[];
}

/** One launched region (an adaptive-eager region, an op run alone, a compiled-graph execution). */
export interface ITraceRegionInfo {
  step?: number | null;
  n_ops?: number | null;
  launches?: number | null;
  first_op?: string | null;
  last_op?: string | null;
  /** What ended the region, with the boundary op's line. */
  ended_by?: string | null;
  /** What to change in the user's code ('' when the user's code did not end it). */
  fix?: string | null;
}

/** Job view: one collective instance, every rank's arrival (its lane) and the rank that arrived last. */
export interface ITraceLink {
  key: string;
  op: string;
  index: number;
  lanes: string[];
  arrival: number[];
  exit: number;
  last_lane: string | null;
  max_wait_ns: number;
}

export interface ITraceWindow {
  origin_ns: number;
  start_ns: number;
  end_ns: number;
  width_px: number;
  px_ns: number;
  run_start_ns: number;
  run_end_ns: number;
  total_ops: number;
  names: string[];
  steps: { step: number; start: number }[];
  lanes: ITraceLane[];
  /** Overview only: details of its one-op boxes by seq. */
  ops?: Record<string, ITraceOpInfo>;
  /** Details of the window's one-region boxes, by region. */
  regions?: Record<string, ITraceRegionInfo>;
  clock?: string;
  /** Job view: collectives linked across ranks (none when more than the server links are in the window). */
  links?: ITraceLink[];
  links_in_window?: number;
  job?: { ranks: number[]; expanded: number[]; straggler: number | null; max_expanded: number };
}

/** What the viewer shows about one op (a stored device_ops row, or the overview's subset). */
export interface ITraceOpInfo {
  seq?: number;
  name?: string;
  engine?: string;
  core?: number;
  start_ns?: number;
  end_ns?: number;
  module?: string | null;
  source?: string | null;
  input_shapes?: string | null;
  output_shapes?: string | null;
  flops?: number | null;
  bytes_read?: number | null;
  bytes_written?: number | null;
  bound?: string | null;
  launch_ns?: number | null;
  step?: number | null;
}

export interface ITraceOpDetail {
  op: ITraceOpInfo;
  lane: string | null;
  host_lane: string | null;
}

export interface ITraceSearchResult {
  seq: number;
  name: string;
  lane: string;
  start: number;
  end: number;
}

export interface ITraceSearch {
  total: number;
  results: ITraceSearchResult[];
  /** What the search could not cover (e.g. a rank with no stored timeline), said next to the count. */
  note?: string;
}

/** Where the viewer's data comes from; times in requests are absolute ns (the run's clock). */
export interface ITraceSource {
  /** Boxes of [startNs, endNs) at `widthPx` (whole run when both are undefined). */
  window(startNs: number | undefined, endNs: number | undefined, widthPx: number): Promise<ITraceWindow>;
  op(seq: number): Promise<ITraceOpDetail>;
  search(query: string): Promise<ITraceSearch>;
  /** Whether zooming asks for finer boxes (a server) or only magnifies the overview. */
  readonly levelOfDetail: boolean;
  /** Job view: show a rank's own lanes instead of its summary lane, or fold them back. */
  toggleRank?(rank: number): void;
}
