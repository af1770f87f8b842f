/**
 * Which runs of a folder's store a notebook's views list, in which group: the notebook's own runs, the runs that
 * belong to no notebook (imported traces, `neuron-studio run` scripts, many-rank jobs: nobody else lists them, so
 * they are always shown) and the runs of other notebooks sharing the store (shown only when asked for).
 */
import { IRunRow } from './tokens';
import { samePath } from './variants';

export interface IRunGroups {
  own: IRunRow[];
  unowned: IRunRow[];
  others: IRunRow[];
}

export function groupRuns(runs: IRunRow[], notebookPath: string | null): IRunGroups {
  const groups: IRunGroups = { own: [], unowned: [], others: [] };
  for (const run of runs) {
    if (!run.notebook) {
      groups.unowned.push(run);
    } else if (samePath(run.notebook, notebookPath)) {
      groups.own.push(run);
    } else {
      groups.others.push(run);
    }
  }
  return groups;
}

/** What a run with no notebook is, as its row says it: a job, an imported trace, or a script run. */
export function unownedKind(run: IRunRow): string {
  if (run.ranks > 1) {
    return run.backend === 'imported' ? `imported job (${run.ranks} ranks)` : `job (${run.ranks} ranks)`;
  }
  return run.backend === 'imported' ? 'imported trace' : 'script';
}

/** The heading of the group of runs with no notebook. */
export const UNOWNED_GROUP = 'Imported traces, scripts and jobs (no notebook)';
