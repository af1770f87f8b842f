/**
 * The profile's Timeline tab: the trace viewer over the stored run (server, level of detail) when the
 * output's notebook has it, else over the overview the summary carries.
 */
import { el } from '../dom';
import type { IProfileViewActions } from '../mime';
import { IProfilePayload } from '../tokens';
import { ProfileTraceSource, ServerTraceSource } from './sources';
import { ITraceWindow } from './types';
import { TraceViewer } from './viewer';

export function traceTab(
  p: IProfilePayload,
  actions: IProfileViewActions,
  sourceLink: (source: string) => HTMLElement | string,
  kernelLink: (opName: string) => HTMLElement | null
): HTMLElement | null {
  const overview = (p.trace_view ?? null) as ITraceWindow | null;
  if (!overview || !Array.isArray(overview.lanes)) {
    return null;
  }
  const box = el('div', { class: 'ns-TraceBox' });
  const runId = typeof p.run_id === 'number' ? p.run_id : null;
  const source = new ProfileTraceSource(overview, () => {
    const path = runId !== null ? actions.notebookPathOf?.(box) ?? null : null;
    return path && runId !== null ? new ServerTraceSource(runId, path) : null;
  });
  // the overview at once; the stored run's whole-run answer (or, without one, the overview again) replaces it
  const viewer = new TraceViewer(source, { sourceLink, kernelLink, overview, note: unsizedNote(overview) });
  box.appendChild(viewer.node);
  return box;
}

/** The summary's note on a trace whose ops were recorded without shapes (its device lanes are not the ops' time). */
export function unsizedNote(overview: ITraceWindow | null): string | undefined {
  const note = (overview as { note?: unknown } | null)?.note;
  return typeof note === 'string' && note ? `⚠ ${note}` : undefined;
}
