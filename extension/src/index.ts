/**
 * Neuron Studio for JupyterLab: plugin declarations only. Views live in mime.ts, panel.ts, status.ts.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, Notification, WidgetTracker } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { FileEditor } from '@jupyterlab/fileeditor';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { createRendererFactory, el, IProfileViewActions, parseSource } from './mime';
import { latestProfile, resolveSourceCell, revealCellLine } from './sources';
import { findProfiledCell, insertBelow, samePath } from './variants';
import { ProfilerPanel } from './panel';
import { neuronIcon, ProfilerSidebar } from './sidebar';
import { requestAPI } from './request';
import { NeuronStatusItem } from './status';
import {
  CommandIDs,
  IKernelRef,
  IKernelSourceResponse,
  INeuronStatusModel,
  IVariantRequest,
  NeuronStatusModel
} from './tokens';

const PLUGIN_PREFIX = 'neuron-studio-lab';

/** Run a command from a click: failures become a notification, never an unhandled rejection. */
function run(app: JupyterFrontEnd, id: string, args: Record<string, any>): void {
  app.commands.execute(id, args).catch(error => {
    Notification.error(`Neuron Studio: ${(error as Error)?.message ?? String(error)}`, { autoClose: 8000 });
  });
}

/** Actions the views trigger: all go through commands so they are scriptable and testable. */
function viewActions(app: JupyterFrontEnd): IProfileViewActions {
  return {
    openKernel: (kernel: IKernelRef) =>
      run(app, CommandIDs.openKernel, { file: kernel.file ?? '', line: kernel.line ?? 1 }),
    openProfiler: (runId: number | null) => run(app, CommandIDs.openProfiler, runId === null ? {} : { runId }),
    insertVariant: (request: IVariantRequest, origin: HTMLElement | null, notebookPath?: string | null) => {
      const panelId = origin?.closest('.jp-NotebookPanel')?.id;
      const cellNode = origin?.closest('.jp-Cell');
      if (cellNode && !cellNode.id) {
        cellNode.id = `ns-cell-${Math.random().toString(36).slice(2)}`;
      }
      return app.commands
        .execute(CommandIDs.insertVariant, {
          source: request.source,
          profiledSource: request.profiled.source,
          ...(request.profiled.id ? { cellId: request.profiled.id } : {}),
          ...(request.profiled.notebook ? { path: request.profiled.notebook } : {}),
          ...(notebookPath ? { panelPath: notebookPath } : {}),
          ...(panelId ? { panelId } : {}),
          ...(cellNode?.id ? { ownCellId: cellNode.id } : {}),
          run: request.run
        })
        .then(
          () => null,
          error => String((error as Error)?.message ?? error)
        );
    },
    notebookPathOf: (node: HTMLElement) => {
      const id = node.closest('.jp-NotebookPanel')?.id;
      for (const widget of id ? app.shell.widgets('main') : []) {
        if (widget.id === id) {
          return (widget as unknown as { context?: { path?: string } }).context?.path ?? null;
        }
      }
      return null;
    },
    openSource: (source: string, origin: HTMLElement | null, notebookPath?: string | null, cellSource?: string | null) => {
      const panelId = origin?.closest('.jp-NotebookPanel')?.id;
      // the cell holding the clicked output, by its DOM id (lumino widgets have one)
      const cellNode = origin?.closest('.jp-Cell');
      if (cellNode && !cellNode.id) {
        cellNode.id = `ns-cell-${Math.random().toString(36).slice(2)}`;
      }
      const cellId = cellNode?.id;
      run(app, CommandIDs.openSource, {
        source,
        ...(panelId ? { panelId } : {}),
        ...(cellId ? { cellId } : {}),
        ...(notebookPath ? { path: notebookPath } : {}),
        ...(cellSource ? { cellSource } : {})
      });
    }
  };
}

const statusModelPlugin: JupyterFrontEndPlugin<INeuronStatusModel> = {
  id: `${PLUGIN_PREFIX}:status-model`,
  description: 'Holds the backend, chip and mode of the last profile rendered.',
  autoStart: true,
  provides: INeuronStatusModel,
  activate: (): INeuronStatusModel => new NeuronStatusModel()
};

const rendererPlugin: JupyterFrontEndPlugin<void> = {
  id: `${PLUGIN_PREFIX}:renderer`,
  description: 'Renders application/vnd.neuron-studio.profile+json outputs.',
  autoStart: true,
  requires: [IRenderMimeRegistry, INeuronStatusModel],
  activate: (app: JupyterFrontEnd, rendermime: IRenderMimeRegistry, status: INeuronStatusModel) => {
    rendermime.addFactory(createRendererFactory({ actions: viewActions(app), status }), 0);
  }
};

/** Show a kernel file that lives outside the server root (installed package) read-only. */
function sourceViewer(info: IKernelSourceResponse): MainAreaWidget {
  const lines = (info.source ?? '').split('\n');
  const pre = el('pre', { class: 'ns-SourceView' });
  lines.forEach((text, i) => {
    const row = el('div', { class: 'ns-SourceLine', attrs: { 'data-line': String(i + 1) } },
      el('span', { class: 'ns-SourceLineNo', text: String(i + 1).padStart(4, ' ') + '  ' }),
      text);
    if (i + 1 === info.line) {
      row.classList.add('ns-mod-current');
    }
    pre.appendChild(row);
  });
  const content = new Widget({ node: el('div', { class: 'ns-SourceViewBox' }, pre) });
  const widget = new MainAreaWidget({ content });
  widget.title.label = `${info.name ?? 'kernel'} (read-only)`;
  widget.title.closable = true;
  widget.node.dataset.neuronLine = String(info.line);
  return widget;
}

const commandsPlugin: JupyterFrontEndPlugin<void> = {
  id: `${PLUGIN_PREFIX}:commands`,
  description: 'Neuron Profiler panel and kernel-source navigation.',
  autoStart: true,
  requires: [IDocumentManager],
  optional: [ICommandPalette, ILauncher, INotebookTracker, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    docManager: IDocumentManager,
    palette: ICommandPalette | null,
    launcher: ILauncher | null,
    notebooks: INotebookTracker | null,
    restorer: ILayoutRestorer | null
  ) => {
    const actions = viewActions(app);
    const tracker = new WidgetTracker<MainAreaWidget<ProfilerPanel>>({ namespace: 'neuron-studio-profiler' });
    let panel: MainAreaWidget<ProfilerPanel> | null = null;

    app.commands.addCommand(CommandIDs.openKernel, {
      label: 'Open Neuron Kernel Source',
      describedBy: {
        args: {
          type: 'object',
          properties: { file: { type: 'string' }, line: { type: 'number' } },
          required: ['file']
        }
      },
      execute: async args => {
        const file = String(args.file ?? '');
        const line = Math.max(1, Math.floor(Number(args.line ?? 1)) || 1);
        const info = await requestAPI<IKernelSourceResponse>('kernel-source', { file, line });
        if (!info.in_root || !info.path) {
          const viewer = sourceViewer(info);
          app.shell.add(viewer, 'main');
          app.shell.activateById(viewer.id);
          viewer.node.querySelector('.ns-mod-current')?.scrollIntoView({ block: 'center' });
          return viewer;
        }
        const widget = docManager.openOrReveal(info.path, 'Editor');
        if (!widget) {
          throw new Error(`Could not open ${info.path}`);
        }
        await widget.context.ready;
        await widget.revealed;
        const content = widget.content as unknown as FileEditor;
        const editor = content.editor;
        const position = { line: info.line - 1, column: 0 };
        editor.setCursorPosition(position);
        editor.revealPosition(position);
        editor.focus();
        widget.node.dataset.neuronLine = String(info.line);
        return widget;
      }
    });

    app.commands.addCommand(CommandIDs.openSource, {
      label: 'Go to Op Source',
      caption: 'Jump to the notebook cell line (cell-<In>:<line>) or open the file at the line',
      describedBy: {
        args: {
          type: 'object',
          properties: {
            source: { type: 'string' },
            panelId: { type: 'string' },
            cellId: { type: 'string' },
            path: { type: 'string' },
            cellSource: { type: 'string' }
          },
          required: ['source']
        }
      },
      execute: async args => {
        const source = String(args.source ?? '');
        const parsed = parseSource(source);
        if (!parsed) {
          throw new Error(`not a source location: ${source}`);
        }
        if (parsed.kind === 'file') {
          return app.commands.execute(CommandIDs.openKernel, { file: parsed.file, line: parsed.line });
        }
        if (!notebooks) {
          throw new Error('no notebook tracker');
        }
        // the notebook holding the clicked output, else the run's notebook, else the current one
        const byId = typeof args.panelId === 'string' ? notebooks.find(p => p.id === args.panelId) : undefined;
        const byPath =
          typeof args.path === 'string' ? notebooks.find(p => p.context.path === args.path) : undefined;
        const candidates = [byId, byPath, notebooks.currentWidget].filter(
          (p): p is NotebookPanel => !!p && !p.isDisposed
        );
        const ownNode = typeof args.cellId === 'string' && args.cellId ? document.getElementById(args.cellId) : null;
        const cellSource = typeof args.cellSource === 'string' ? args.cellSource : null;
        for (const panel of candidates) {
          const cell = resolveSourceCell(panel, parsed.count, { node: ownNode, cellSource });
          if (cell) {
            app.shell.activateById(panel.id);
            await revealCellLine(panel, cell, parsed.line, source);
            return cell;
          }
        }
        throw new Error(
          `In [${parsed.count}] is not in ${candidates[0]?.context.path ?? 'an open notebook'} (re-run the notebook?)`
        );
      }
    });

    app.commands.addCommand(CommandIDs.insertVariant, {
      label: 'Insert What-if Variant Cell',
      caption: 'Insert a what-if row\'s cell below the profiled cell (never changing it), and optionally run it',
      describedBy: {
        args: {
          type: 'object',
          properties: {
            source: { type: 'string' },
            profiledSource: { type: 'string' },
            cellId: { type: 'string' },
            path: { type: 'string' },
            panelPath: { type: 'string' },
            panelId: { type: 'string' },
            ownCellId: { type: 'string' },
            run: { type: 'boolean' }
          },
          required: ['source', 'profiledSource']
        }
      },
      execute: async args => {
        const source = String(args.source ?? '');
        const profiled = {
          source: String(args.profiledSource ?? ''),
          id: typeof args.cellId === 'string' ? args.cellId : null
        };
        if (!source || !profiled.source) {
          throw new Error('no variant cell to insert');
        }
        if (!notebooks) {
          throw new Error('no notebook tracker: copy the line instead');
        }
        // the notebook holding the clicked output, else the run's notebook (the panel's, or the kernel's path)
        const byId = typeof args.panelId === 'string' ? notebooks.find(p => p.id === args.panelId) : undefined;
        const paths = [args.panelPath, args.path].filter((x): x is string => typeof x === 'string' && !!x);
        const byPath = notebooks.find(p => paths.some(path => samePath(p.context.path, path)));
        const panel = [byId, byPath].find((p): p is NotebookPanel => !!p && !p.isDisposed);
        if (!panel) {
          throw new Error(
            paths.length
              ? `${paths[0]} is not open: open it to insert the variant, or copy the line`
              : 'this profile does not say which notebook it ran in: copy the line instead'
          );
        }
        await panel.context.ready;
        const own = typeof args.ownCellId === 'string' ? document.getElementById(args.ownCellId) : null;
        const found = findProfiledCell(panel, profiled, own);
        if ('why' in found) {
          throw new Error(found.why);
        }
        app.shell.activateById(panel.id);
        return insertBelow(panel, found.cell, source, args.run === true);
      }
    });

    app.commands.addCommand(CommandIDs.openProfiler, {
      label: 'Neuron Profiler',
      icon: neuronIcon,
      caption: 'Runs, timelines and op tables of this notebook’s %%neuron cells',
      describedBy: {
        args: { type: 'object', properties: { runId: { type: 'number' }, path: { type: 'string' } } }
      },
      execute: async args => {
        if (!panel || panel.isDisposed) {
          const content = new ProfilerPanel({
            getNotebookPath: () =>
              (typeof args.path === 'string' && args.path) || notebooks?.currentWidget?.context.path || null,
            actions
          });
          panel = new MainAreaWidget({ content });
          panel.id = 'neuron-studio-profiler';
          panel.title.label = 'Neuron Profiler';
          panel.title.closable = true;
          void tracker.add(panel);
        }
        if (!panel.isAttached) {
          app.shell.add(panel, 'main');
        }
        app.shell.activateById(panel.id);
        await panel.content.refresh();
        if (args.runId !== undefined && args.runId !== null) {
          await panel.content.showRun(Number(args.runId));
        }
        return panel;
      }
    });

    app.commands.addCommand(CommandIDs.importTraces, {
      label: 'Import Traces into Neuron Profiler…',
      caption: 'Store a trace file, a folder of per-rank traces (a job) or a glob as a run, and show it',
      describedBy: {
        args: {
          type: 'object',
          properties: { target: { type: 'string' }, name: { type: 'string' }, path: { type: 'string' } }
        }
      },
      execute: async args => {
        const opened = (await app.commands.execute(CommandIDs.openProfiler, typeof args.path === 'string' ? { path: args.path } : {})) as MainAreaWidget<ProfilerPanel>;
        return opened.content.importTraces(
          typeof args.target === 'string' ? args.target : undefined,
          typeof args.name === 'string' ? args.name : undefined
        );
      }
    });

    palette?.addItem({ command: CommandIDs.openProfiler, category: 'Neuron Studio' });
    palette?.addItem({ command: CommandIDs.importTraces, category: 'Neuron Studio' });
    launcher?.add({ command: CommandIDs.openProfiler, category: 'Neuron Studio', rank: 1 });
    // the left sidebar's entry: this notebook's runs, each opening the panel on it
    const sidebar = new ProfilerSidebar({
      getNotebookPath: () => notebooks?.currentWidget?.context.path ?? null,
      openProfiler: (runId, path) =>
        run(app, CommandIDs.openProfiler, { ...(runId === null ? {} : { runId }), ...(path ? { path } : {}) })
    });
    app.shell.add(sidebar, 'left', { rank: 800 });
    notebooks?.currentChanged.connect(() => {
      if (sidebar.isVisible) {
        void sidebar.refresh();
      }
    });
    restorer?.add(sidebar, sidebar.id);
    if (restorer) {
      void restorer.restore(tracker, { command: CommandIDs.openProfiler, name: () => 'neuron-studio-profiler' });
    }
  }
};

const statusBarPlugin: JupyterFrontEndPlugin<void> = {
  id: `${PLUGIN_PREFIX}:status-bar`,
  description: 'Shows backend · chip · mode of the active notebook\'s latest Neuron Studio profile.',
  autoStart: true,
  requires: [INeuronStatusModel],
  optional: [IStatusBar, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    model: INeuronStatusModel,
    statusBar: IStatusBar | null,
    notebooks: INotebookTracker | null
  ) => {
    if (notebooks) {
      // the active notebook's latest profile output: rescanned when the active notebook changes,
      // when its cells or outputs change, and when a profile is rendered
      let watched: NotebookPanel | null = null;
      let pending = 0;
      const scan = () => {
        pending = 0;
        const panel = notebooks.currentWidget;
        if (!panel || panel.isDisposed || !panel.model) {
          model.setNotebook(undefined, null);
          return;
        }
        model.setNotebook(panel.context.path, latestProfile(panel));
      };
      const schedule = () => {
        if (!pending) {
          pending = window.setTimeout(scan, 0);
        }
      };
      const watch = (panel: NotebookPanel | null) => {
        if (watched?.model) {
          watched.model.contentChanged.disconnect(schedule);
        }
        watched?.sessionContext.statusChanged.disconnect(schedule);
        watched = panel;
        if (panel) {
          void panel.context.ready.then(() => {
            if (watched === panel && panel.model) {
              panel.model.contentChanged.connect(schedule);
              schedule();
            }
          });
          panel.sessionContext.statusChanged.connect(schedule);
        }
        schedule();
      };
      notebooks.currentChanged.connect((_, panel) => watch(panel));
      model.rendered.connect(schedule);
      watch(notebooks.currentWidget);
    }
    if (!statusBar) {
      return;
    }
    statusBar.registerStatusItem(`${PLUGIN_PREFIX}:status`, {
      item: new NeuronStatusItem(model),
      align: 'left',
      rank: 100
    });
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [statusModelPlugin, rendererPlugin, commandsPlugin, statusBarPlugin];
export default plugins;
