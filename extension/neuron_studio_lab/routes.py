"""HTTP routes under `<base_url>/neuron-studio/`. Handlers parse arguments and delegate to `core`.

Every verb of every handler is `@tornado.web.authenticated`; `core.ApiError`s become 4xx/500 in
`_BaseHandler.run`, the one place errors are mapped.

Handlers never block the server's event loop: the work (SQLite, Parquet, numpy, JSON encoding) runs in
a worker thread (`asyncio.to_thread`), so a big run's timeline does not stall the rest of JupyterLab.
A run's prepared device ops are cached on the web application (`core.RunOpsCache`).
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from . import cli_tasks, core, job_view, trace_view

NAMESPACE = "neuron-studio"
CACHE_SETTING = "neuron_studio_run_ops_cache"
TASKS_SETTING = "neuron_studio_cli_tasks"
#: Bytes per write when a file is sent (a job's merged trace can be hundreds of MB).
SEND_CHUNK = 1 << 20


class _BaseHandler(APIHandler):
    """Shared argument parsing and the single error mapping."""

    @tornado.web.authenticated
    def options(self, *args: Any, **kwargs: Any) -> None:
        """APIHandler answers CORS preflights unauthenticated; these routes are same-origin only."""
        super().options(*args, **kwargs)

    @property
    def root_dir(self) -> str:
        return str(self.settings.get("server_root_dir") or self.settings.get("root_dir") or ".")

    def int_arg(self, name: str, default: int | None = None) -> int | None:
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise core.BadRequest(f"{name!r} must be an integer") from None

    def _shared(self, key: str, make: Callable[[], Any]) -> Any:
        """The server-wide object kept in the settings under `key`, made on first use (handlers mounted without
        setup_route_handlers, as in tests, have none yet)."""
        found = self.settings.get(key)
        return found if found is not None else self.settings.setdefault(key, make())

    @property
    def cache(self) -> core.RunOpsCache:
        return self._shared(CACHE_SETTING, core.RunOpsCache)

    @property
    def tasks(self) -> cli_tasks.TaskRunner:
        return self._shared(TASKS_SETTING, cli_tasks.TaskRunner)

    def send_json(self, body: str) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(body)

    async def run(self, fn: Callable[[], Any]) -> None:
        """Compute and encode `fn()` in a worker thread; ApiErrors become their status with a JSON body."""
        try:
            body = await asyncio.to_thread(lambda: json.dumps(fn(), allow_nan=False))
        except core.ApiError as exc:
            self.send_api_error(exc)
            return
        self.send_json(body)

    def send_api_error(self, exc: core.ApiError) -> None:
        self.set_status(exc.status)
        self.send_json(json.dumps({"error": type(exc).__name__, "message": str(exc)}))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # anything that escaped `run`: a JSON body, no traceback
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"error": "ServerError" if status_code >= 500 else "HTTPError",
                                "message": self._reason}))


class RunsHandler(_BaseHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        path = self.get_query_argument("path", "")
        await self.run(lambda: core.list_runs(self.root_dir, path, limit=self.int_arg("limit")))


class RunHandler(_BaseHandler):
    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        path = self.get_query_argument("path", "")
        await self.run(lambda: core.get_run(self.root_dir, path, int(run_id)))


class TimelineHandler(_BaseHandler):
    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        cache = self.cache

        def work() -> Any:
            return core.timeline(
                self.root_dir,
                self.get_query_argument("path", ""),
                int(run_id),
                start_ns=self.int_arg("start_ns"),
                end_ns=self.int_arg("end_ns"),
                bins=self.int_arg("bins", core.DEFAULT_BINS),  # type: ignore[arg-type]
                page=self.int_arg("page"),
                page_size=self.int_arg("page_size", core.DEFAULT_PAGE_SIZE),  # type: ignore[arg-type]
                cache=cache,
            )

        await self.run(work)


class TraceHandler(_BaseHandler):
    """Level-of-detail boxes of every lane for a window (`start_ns`, `end_ns`) drawn `width_px` wide."""

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        cache, path = self.cache, self.get_query_argument("path", "")
        await self.run(lambda: trace_view.trace_window(
            self.root_dir, path, int(run_id), start_ns=self.int_arg("start_ns"), end_ns=self.int_arg("end_ns"),
            width_px=self.int_arg("width_px"), cache=cache))


class TraceOpHandler(_BaseHandler):
    """One op's details (shapes, module, source) by `seq`."""

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        cache, path = self.cache, self.get_query_argument("path", "")
        await self.run(lambda: trace_view.trace_op(self.root_dir, path, int(run_id), self.int_arg("seq"), cache=cache))


class JobTraceHandler(_BaseHandler):
    """A many-rank run's job timeline for a window: a lane per rank (`expand`: ranks shown in detail)."""

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        cache, path = self.cache, self.get_query_argument("path", "")
        expand = self.get_query_argument("expand", "")
        await self.run(lambda: job_view.job_window(
            self.root_dir, path, int(run_id), start_ns=self.int_arg("start_ns"), end_ns=self.int_arg("end_ns"),
            width_px=self.int_arg("width_px"), expand=expand, cache=cache))


class JobTraceOpHandler(_BaseHandler):
    """One op of a rank by its job box id (`seq`); `expand`: the ranks the view shows in detail."""

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        cache, path = self.cache, self.get_query_argument("path", "")
        expand = self.get_query_argument("expand", "")
        await self.run(lambda: job_view.job_op(self.root_dir, path, int(run_id), self.int_arg("seq"), cache=cache,
                                               expand=expand))


class TraceSearchHandler(_BaseHandler):
    """Ops whose name contains `q`."""

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        cache, path = self.cache, self.get_query_argument("path", "")
        query = self.get_query_argument("q", "")
        await self.run(lambda: trace_view.trace_search(self.root_dir, path, int(run_id), query, self.int_arg("limit"),
                                                       cache=cache))


class JobTraceSearchHandler(_BaseHandler):
    """Ops of every rank whose name contains `q` (`expand`: the ranks the view shows in detail)."""

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        cache, path = self.cache, self.get_query_argument("path", "")
        query, expand = self.get_query_argument("q", ""), self.get_query_argument("expand", "")
        await self.run(lambda: job_view.job_search(self.root_dir, path, int(run_id), query, self.int_arg("limit"),
                                                   expand=expand, cache=cache))


class ImportHandler(_BaseHandler):
    """POST {"path": notebook, "target": file | folder | glob under the root, "name"?}: stored as one run in
    the notebook's store (`neuron-studio import` in a child process); answers the run's id."""

    @tornado.web.authenticated
    async def post(self) -> None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict) or not all(isinstance(body.get(k, ""), str) for k in ("path", "target", "name")):
            self.send_api_error(core.BadRequest('the body must be JSON {"path": ..., "target": ..., "name": ...} '
                                                "with string values"))
            return
        try:
            answer = await cli_tasks.import_traces(self.tasks, self.root_dir, body.get("path", ""),
                                                   body.get("target", ""), body.get("name") or None)
        except core.ApiError as exc:
            self.send_api_error(exc)
            return
        self.send_json(json.dumps(answer))


class PerfettoHandler(_BaseHandler):
    """The run as one Chrome trace (gzip) to open in Perfetto: a job's ranks aligned, collectives linked."""

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        try:
            path = await cli_tasks.perfetto_export(self.tasks, self.root_dir, self.get_query_argument("path", ""),
                                                   int(run_id))
        except core.ApiError as exc:
            self.send_api_error(exc)
            return
        self.set_header("Content-Type", "application/gzip")
        self.set_header("Content-Disposition", f'attachment; filename="neuron-studio-run-{int(run_id)}.json.gz"')
        self.set_header("Content-Length", str(path.stat().st_size))
        with path.open("rb") as fh:
            while chunk := fh.read(SEND_CHUNK):
                self.write(chunk)
                await self.flush()
        self.finish()


class KernelSourceHandler(_BaseHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        file = self.get_query_argument("file", "")
        await self.run(lambda: core.kernel_source(self.root_dir, file, self.int_arg("line", 1)))


def handlers(base_url: str) -> list[tuple[str, type[_BaseHandler]]]:
    """The extension's (pattern, handler) pairs; tests enumerate these to check authentication."""
    prefix = url_path_join(base_url, NAMESPACE)
    return [
        (url_path_join(prefix, "runs"), RunsHandler),
        (url_path_join(prefix, r"runs/(\d+)"), RunHandler),
        (url_path_join(prefix, r"runs/(\d+)/timeline"), TimelineHandler),
        (url_path_join(prefix, r"runs/(\d+)/trace"), TraceHandler),
        (url_path_join(prefix, r"runs/(\d+)/trace/op"), TraceOpHandler),
        (url_path_join(prefix, r"runs/(\d+)/trace/search"), TraceSearchHandler),
        (url_path_join(prefix, r"runs/(\d+)/job"), JobTraceHandler),
        (url_path_join(prefix, r"runs/(\d+)/job/op"), JobTraceOpHandler),
        (url_path_join(prefix, r"runs/(\d+)/job/search"), JobTraceSearchHandler),
        (url_path_join(prefix, r"runs/(\d+)/perfetto"), PerfettoHandler),
        (url_path_join(prefix, "runs/import"), ImportHandler),
        (url_path_join(prefix, "kernel-source"), KernelSourceHandler),
    ]


def setup_route_handlers(web_app: tornado.web.Application) -> None:
    web_app.settings.setdefault(CACHE_SETTING, core.RunOpsCache())
    web_app.settings.setdefault(TASKS_SETTING, cli_tasks.TaskRunner())
    web_app.add_handlers(".*$", handlers(web_app.settings["base_url"]))
