/**
 * Neuron Studio for JupyterLab: plugin declarations only. Views live in mime.ts, panel.ts, status.ts.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { IDocumentManager } from '@jupyterlab/docmanager';
import { FileEditor } from '@jupyterlab/fileeditor';
import { ILauncher } from '@jupyterlab/launcher';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { createRendererFactory, el, IProfileViewActions } from './mime';
import { ProfilerPanel } from './panel';
import { requestAPI } from './request';
import { NeuronStatusItem } from './status';
import {
  CommandIDs,
  IKernelRef,
  IKernelSourceResponse,
  INeuronStatusModel,
  NeuronStatusModel
} from './tokens';

const PLUGIN_PREFIX = 'neuron-studio-lab';

/** Actions the views trigger: both go through commands so they are scriptable and testable. */
function viewActions(app: JupyterFrontEnd): IProfileViewActions {
  return {
    openKernel: (kernel: IKernelRef) =>
      void app.commands.execute(CommandIDs.openKernel, { file: kernel.file, line: kernel.line }),
    openProfiler: (runId: number | null) =>
      void app.commands.execute(CommandIDs.openProfiler, runId === null ? {} : { runId })
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

    app.commands.addCommand(CommandIDs.openProfiler, {
      label: 'Neuron Profiler',
      caption: 'Runs, timelines and op tables of this notebook’s Neuron Studio store',
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

    palette?.addItem({ command: CommandIDs.openProfiler, category: 'Neuron Studio' });
    launcher?.add({ command: CommandIDs.openProfiler, category: 'Other', rank: 10 });
    if (restorer) {
      void restorer.restore(tracker, { command: CommandIDs.openProfiler, name: () => 'neuron-studio-profiler' });
    }
  }
};

const statusBarPlugin: JupyterFrontEndPlugin<void> = {
  id: `${PLUGIN_PREFIX}:status-bar`,
  description: 'Shows backend · chip · mode of the last Neuron Studio profile.',
  autoStart: true,
  requires: [INeuronStatusModel],
  optional: [IStatusBar],
  activate: (app: JupyterFrontEnd, model: INeuronStatusModel, statusBar: IStatusBar | null) => {
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
