"""Server routes: results, pagination, authentication on every handler, path traversal, hostile strings."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import tornado.httpclient
import tornado.web

from neuron_studio_lab import core, routes

pytest_plugins = ("pytest_jupyter.jupyter_server",)

FIXTURES = Path(__file__).parent / "fixtures"
HOSTILE = "<script>alert(1)</script>"
RUN_KW = dict(mode="adaptive", chip="trn2", backend="emulated")


@pytest.fixture
def kernels_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kd = tmp_path / "site" / "neuron_studio" / "kernels"
    kd.mkdir(parents=True)
    (kd / "matmul.py").write_text("".join(f"# line {i}\n" for i in range(1, 31)))
    monkeypatch.setenv("NEURON_STUDIO_KERNELS_DIR", str(kd))
    return kd


def _device_ops(n: int = 1000) -> pa.Table:
    """Alternating tensor/vector ops, each 100 ns, back to back on two cores; every 10th op is hostile."""
    seq = np.arange(n, dtype=np.int64)
    start = (seq // 2) * 100
    names = [HOSTILE if i % 10 == 0 else f"aten::op{i}" for i in range(n)]
    return pa.table({
        "seq": seq,
        "name": pa.array(names, pa.string()),
        "core": pa.array(seq % 2, pa.int32()),
        "engine": pa.array(["tensor" if i % 2 == 0 else "vector" for i in range(n)]),
        "start_ns": start,
        "end_ns": start + 100,
        "flops": np.full(n, 1000, dtype=np.int64),
        "bytes_read": np.full(n, 64, dtype=np.int64),
        "bytes_written": np.full(n, 32, dtype=np.int64),
        "bound": pa.array(["compute"] * n),
        "module": pa.array([f"block.{HOSTILE}"] * n),
        "source": pa.array(["cell:3"] * n),
    })


@pytest.fixture
def seeded(jp_root_dir: Path) -> dict:
    nb_dir = jp_root_dir / "work"
    nb_dir.mkdir()
    (nb_dir / "02.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    RunStore = core.run_store_module().RunStore
    store = RunStore(nb_dir / ".neuron_studio")
    summary = json.loads((FIXTURES / "profile.json").read_text())
    first = store.begin_run(cell_source="loss = step()", options={"steps": 5}, name="warmup",
                            notebook="02.ipynb", **RUN_KW)
    store.finish_run(first, status="ok", summary=None, step_time_ns=2_000_000, mfu=0.2)
    second = store.begin_run(cell_source="loss = step()", options={"steps": 5}, name=HOSTILE,
                             notebook="02.ipynb", **RUN_KW)
    summary["run_id"] = second
    store.finish_run(second, status="ok", summary=summary, step_time_ns=1_234_567, mfu=float("nan"))
    store.save_table(second, "device_ops", _device_ops())
    return {"path": "work/02.ipynb", "first": first, "second": second, "summary": summary,
            "store_root": str(store.root)}


async def _get(jp_fetch, *parts: str, **params):  # noqa: ANN001, ANN202
    resp = await jp_fetch("neuron-studio", *parts, params={k: str(v) for k, v in params.items()})
    return json.loads(resp.body)


async def _status(jp_fetch, *parts: str, **params) -> int:  # noqa: ANN001
    with pytest.raises(tornado.httpclient.HTTPClientError) as info:
        await jp_fetch("neuron-studio", *parts, params={k: str(v) for k, v in params.items()})
    body = json.loads(info.value.response.body)
    assert set(body) >= {"error", "message"}
    return info.value.code


# -- results ------------------------------------------------------------------------------------------


async def test_runs_list(jp_fetch, seeded) -> None:  # noqa: ANN001
    data = await _get(jp_fetch, "runs", path=seeded["path"])
    assert data["store"] == "work/.neuron_studio"
    assert [r["id"] for r in data["runs"]] == [seeded["second"], seeded["first"]]
    top = data["runs"][0]
    assert top["name"] == HOSTILE  # verbatim: the client escapes
    assert top["mfu"] is None  # NaN is not JSON
    assert top["step_time_ns"] == 1_234_567 and top["status"] == "ok" and top["chip"] == "trn2"
    assert "summary" not in top and "trace_dir" not in top
    assert top["parent_run"] == seeded["first"]


async def test_runs_list_without_store_is_empty(jp_fetch, jp_root_dir) -> None:  # noqa: ANN001
    (jp_root_dir / "x.ipynb").write_text("{}")
    assert await _get(jp_fetch, "runs", path="x.ipynb") == {"runs": [], "store": None}
    assert not (jp_root_dir / ".neuron_studio").exists()  # reading never creates a store


async def test_run_detail(jp_fetch, seeded) -> None:  # noqa: ANN001
    data = await _get(jp_fetch, "runs", str(seeded["second"]), path=seeded["path"])
    assert data["run"]["summary"] == seeded["summary"]
    assert HOSTILE in [h["op"] for h in data["run"]["summary"]["hot_ops"]]  # verbatim: the client escapes
    assert data["tables"] == ["device_ops"]
    assert data["previous_run"] == seeded["first"]
    assert await _status(jp_fetch, "runs", "999", path=seeded["path"]) == 404


async def test_timeline_bins(jp_fetch, seeded) -> None:  # noqa: ANN001
    data = await _get(jp_fetch, "runs", str(seeded["second"]), "timeline", path=seeded["path"], bins=10)
    assert data["start_ns"] == 0 and data["end_ns"] == 500 * 100 and data["bins"] == 10 and data["cores"] == 2
    # tensor ops run on core 0 and vector ops on core 1, back to back: each engine is busy on one of
    # two cores all the time -> 50 % utilization in every bin
    assert data["engines"]["tensor"] == pytest.approx([0.5] * 10)
    assert data["engines"]["vector"] == pytest.approx([0.5] * 10)
    assert data["engines"]["dma"] == [0.0] * 10
    assert list(data["engines"])[:5] == ["tensor", "vector", "scalar", "gpsimd", "dma"]
    assert "ops" not in data

    window = await _get(jp_fetch, "runs", str(seeded["second"]), "timeline", path=seeded["path"],
                        start_ns=0, end_ns=1000, bins=4)
    assert window["end_ns"] == 1000 and window["bin_ns"] == 250
    assert window["engines"]["tensor"] == pytest.approx([0.5] * 4)

    # a window reaching past the trace: the bins after the last op are idle
    past = await _get(jp_fetch, "runs", str(seeded["second"]), "timeline", path=seeded["path"],
                      start_ns=0, end_ns=100_000, bins=2)
    assert past["engines"]["tensor"] == pytest.approx([0.5, 0.0])


def test_coverage_partial_overlap() -> None:
    edges = np.array([0.0, 10.0, 20.0, 30.0])
    interval_coverage = core.studio_module("neuron_studio.profiler.analysis.binning").interval_coverage
    busy = interval_coverage(edges, np.array([5.0, 12.0]), np.array([15.0, 13.0]))
    assert busy.tolist() == pytest.approx([5.0, 6.0, 0.0])


async def test_timeline_pagination(jp_fetch, seeded) -> None:  # noqa: ANN001
    rid = str(seeded["second"])
    page0 = await _get(jp_fetch, "runs", rid, "timeline", path=seeded["path"], page=0, page_size=300)
    ops = page0["ops"]
    assert (ops["total"], ops["page"], ops["page_size"], ops["pages"]) == (1000, 0, 300, 4)
    assert [r["seq"] for r in ops["rows"]] == list(range(300))
    assert ops["rows"][0]["name"] == HOSTILE and ops["rows"][0]["module"] == f"block.{HOSTILE}"
    assert set(ops["rows"][0]) == set(core.DEVICE_OPS_COLUMNS)

    last = await _get(jp_fetch, "runs", rid, "timeline", path=seeded["path"], page=3, page_size=300)
    assert [r["seq"] for r in last["ops"]["rows"]] == list(range(900, 1000))
    beyond = await _get(jp_fetch, "runs", rid, "timeline", path=seeded["path"], page=9, page_size=300)
    assert beyond["ops"]["rows"] == []

    capped = await _get(jp_fetch, "runs", rid, "timeline", path=seeded["path"], page=0, page_size=10**6)
    assert capped["ops"]["page_size"] == core.MAX_PAGE_SIZE

    windowed = await _get(jp_fetch, "runs", rid, "timeline", path=seeded["path"],
                          start_ns=1000, end_ns=1999, page=0, page_size=100)
    assert all(r["end_ns"] >= 1000 and r["start_ns"] <= 1999 for r in windowed["ops"]["rows"])
    assert windowed["ops"]["total"] == 22  # ops at 900..1900 touching the window


@pytest.mark.parametrize(
    "params",
    [{"bins": 0}, {"bins": core.MAX_BINS + 1}, {"bins": "many"}, {"page": -1}, {"page_size": 0},
     {"start_ns": 10, "end_ns": 5}],
)
async def test_timeline_bad_requests(jp_fetch, seeded, params) -> None:  # noqa: ANN001
    assert await _status(jp_fetch, "runs", str(seeded["second"]), "timeline",
                         path=seeded["path"], **params) == 400


async def test_timeline_without_device_ops_is_404(jp_fetch, seeded) -> None:  # noqa: ANN001
    assert await _status(jp_fetch, "runs", str(seeded["first"]), "timeline", path=seeded["path"]) == 404


# -- kernel sources -----------------------------------------------------------------------------------


async def test_kernel_source_inside_root(jp_fetch, jp_root_dir, seeded) -> None:  # noqa: ANN001
    (jp_root_dir / "kernels").mkdir()
    (jp_root_dir / "kernels" / "matmul.py").write_text("a\nb\nc\n")
    data = await _get(jp_fetch, "kernel-source", file="kernels/matmul.py", line=2)
    assert data == {"path": "kernels/matmul.py", "line": 2, "lines": 3, "in_root": True}
    absolute = await _get(jp_fetch, "kernel-source", file=str(jp_root_dir / "kernels" / "matmul.py"), line=99)
    assert absolute["path"] == "kernels/matmul.py" and absolute["line"] == 3  # clamped to the file


async def test_kernel_source_in_kernels_package(jp_fetch, kernels_tree) -> None:  # noqa: ANN001
    data = await _get(jp_fetch, "kernel-source", file=str(kernels_tree / "matmul.py"), line=12)
    assert data["path"] is None and data["in_root"] is False and data["line"] == 12
    assert data["name"] == "matmul.py" and data["source"].splitlines()[11] == "# line 12"


async def test_kernel_source_refusals(jp_fetch, jp_root_dir, tmp_path, kernels_tree) -> None:  # noqa: ANN001
    outside = tmp_path / "secret.py"
    outside.write_text("TOKEN = 1\n")
    (jp_root_dir / "link.py").symlink_to(outside)
    (jp_root_dir / "kernels_link").symlink_to(tmp_path)
    for file in [
        str(outside),
        "../secret.py",
        "../../etc/passwd",
        "/etc/passwd",
        "link.py",  # a symlink inside the root pointing outside
        "kernels_link/secret.py",
        str(kernels_tree / ".." / ".." / ".." / "secret.py"),
        str(kernels_tree / "../../../does-not-exist.py"),
    ]:
        assert await _status(jp_fetch, "kernel-source", file=file, line=1) == 403, file
    assert await _status(jp_fetch, "kernel-source", file="missing.py", line=1) == 404
    assert await _status(jp_fetch, "kernel-source", file="", line=1) == 400
    (jp_root_dir / "ok.py").write_text("x\n")
    assert await _status(jp_fetch, "kernel-source", file="ok.py", line=0) == 400
    assert await _status(jp_fetch, "kernel-source", file="ok.py", line="x") == 400


@pytest.mark.parametrize("path", ["../02.ipynb", "../../etc/passwd", "work/../../x.ipynb", "//../x.ipynb"])
async def test_notebook_path_traversal_refused(jp_fetch, seeded, path) -> None:  # noqa: ANN001
    assert await _status(jp_fetch, "runs", path=path) == 403
    assert await _status(jp_fetch, "runs", str(seeded["second"]), path=path) == 403
    assert await _status(jp_fetch, "runs", str(seeded["second"]), "timeline", path=path) == 403


async def test_leading_slash_is_relative_to_root(jp_fetch, seeded) -> None:  # noqa: ANN001
    # Jupyter API paths are relative to the server root; a leading "/" does not reach the filesystem root
    assert await _get(jp_fetch, "runs", path="/etc/passwd") == {"runs": [], "store": None}
    data = await _get(jp_fetch, "runs", path="/" + seeded["path"])
    assert len(data["runs"]) == 2


async def test_store_outside_root_via_symlink_refused(jp_fetch, jp_root_dir, tmp_path) -> None:  # noqa: ANN001
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    core.run_store_module().RunStore(elsewhere / ".neuron_studio")
    (jp_root_dir / "escape").symlink_to(elsewhere)
    assert await _status(jp_fetch, "runs", path="escape/a.ipynb") == 403


async def test_missing_path_is_400(jp_fetch, seeded) -> None:  # noqa: ANN001
    assert await _status(jp_fetch, "runs") == 400


# -- authentication -----------------------------------------------------------------------------------


def _extension_rules(web_app: tornado.web.Application) -> list[tuple[str, type]]:
    found = []
    for host_rule in web_app.default_router.rules:
        for rule in getattr(host_rule.target, "rules", []):
            handler = rule.target
            if isinstance(handler, type) and handler.__module__ == routes.__name__:
                found.append((rule.matcher.regex.pattern, handler))
    return found


def test_every_verb_is_authenticated() -> None:
    for _, handler in routes.handlers("/"):
        verbs = [m for m in handler.SUPPORTED_METHODS
                 if getattr(handler, m.lower()) is not getattr(tornado.web.RequestHandler, m.lower())]
        assert verbs, handler
        for verb in verbs:
            method = getattr(handler, verb.lower())
            assert getattr(method, "__wrapped__", None) is not None, f"{handler.__name__}.{verb} not authenticated"


async def test_every_registered_handler_refuses_without_token(
    jp_serverapp, jp_fetch, seeded, jp_base_url, jp_root_dir  # noqa: ANN001
) -> None:
    rules = _extension_rules(jp_serverapp.web_app)
    assert {h for _, h in rules} == {h for _, h in routes.handlers(jp_base_url)}
    for pattern, handler in rules:
        url_path = pattern.rstrip("$").replace(r"(\d+)", str(seeded["second"]))
        url_path = re.sub(r"\\(.)", r"\1", url_path)
        assert url_path.startswith(jp_base_url)
        url_path = url_path[len(jp_base_url):]  # jp_fetch adds the base url
        parts = [p for p in url_path.split("/") if p]
        for method in handler.SUPPORTED_METHODS:
            if getattr(handler, method.lower()) is getattr(tornado.web.RequestHandler, method.lower()):
                continue
            body = b"" if method in ("POST", "PUT", "PATCH") else None
            with pytest.raises(tornado.httpclient.HTTPClientError) as info:
                await jp_fetch(*parts, method=method, body=body, headers={"Authorization": ""},
                               params={"path": seeded["path"], "file": "x.py", "seq": "1", "q": "op"})
            assert info.value.code == 403, (pattern, method)
            with pytest.raises(tornado.httpclient.HTTPClientError) as info:
                await jp_fetch(*parts, method=method, body=body, headers={"Authorization": "token wrong"},
                               params={"path": seeded["path"], "file": "x.py", "seq": "1", "q": "op"})
            assert info.value.code == 403, (pattern, method)
        # and the same URL works with the token (the job view answers for many-rank runs only: 404 naming why)
        (jp_root_dir / "work" / "kernel.py").write_text("x = 1\n")
        params = {"path": seeded["path"], "file": "work/kernel.py", "seq": "1", "q": "op"}
        if "job" in parts:
            with pytest.raises(tornado.httpclient.HTTPClientError) as info:
                await jp_fetch(*parts, params=params)
            assert info.value.code == 404 and "not a many-rank job" in info.value.response.body.decode()
            continue
        if parts[-1] in ("import", "perfetto"):  # past authentication: refused for what the request lacks
            with pytest.raises(tornado.httpclient.HTTPClientError) as info:
                await jp_fetch(*parts, params=params, **({"method": "POST", "body": b"{}"}
                                                         if parts[-1] == "import" else {}))
            said = json.loads(info.value.response.body)["message"]
            assert (info.value.code, said.split(" ")[0]) == ((400, "missing") if parts[-1] == "import"
                                                             else (404, "run")), said
            continue
        resp = await jp_fetch(*parts, params=params)
        assert resp.code == 200


def test_store_is_loaded_without_importing_neuron_studio_package() -> None:
    mod = core.run_store_module()
    assert hasattr(mod, "RunStore")
    assert os.path.basename(mod.__file__) == "store.py"


def test_shared_studio_modules_load_without_torch() -> None:
    """The server reuses the studio's engine names and binning from their files, without importing torch."""
    code = (
        "import sys\n"
        "from neuron_studio_lab import core\n"
        "v = core.studio_module('neuron_studio.profiler.vocabulary')\n"
        "b = core.studio_module('neuron_studio.profiler.analysis.binning')\n"
        "print(v.DEVICE_ENGINES, b.interval_coverage.__name__, 'torch' in sys.modules, 'neuron_studio' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["('tensor',", "'vector',", "'scalar',", "'gpsimd',", "'dma')", "interval_coverage",
                                  "False", "False"]


def test_run_store_and_trace_modules_load_without_torch() -> None:
    """The panel's first request (the run list) and the trace routes load the store and the level-of-detail
    code from their files: no torch (importing it took the server about 7 s before the run list answered)."""
    code = (
        "import sys\n"
        "from neuron_studio_lab import core\n"
        "s = core.run_store_module()\n"
        "lod = core.studio_module('neuron_studio.profiler.analysis.trace_lod')\n"
        "print(s.RunStore.__name__, s.writer_identity()[0] > 0, lod.build_lanes.__name__, 'torch' in sys.modules, "
        "'neuron_studio' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                         cwd=Path(core.__file__).parents[1])
    assert out.stdout.split() == ["RunStore", "True", "build_lanes", "False", "False"]


def test_extension_install_always_builds_the_frontend_from_its_sources() -> None:
    """`pip install ./extension` (run.sh's install) builds the labextension from src/ every time: with the
    builder's skip-if-exists, a prebuilt bundle left in the checkout by an earlier build was shipped instead
    (a stale UI; the trace viewer missing and bench_viewer waiting for it)."""
    import tomllib

    # the checkout's extension/pyproject.toml (the installed package has none: it is not an editable install)
    conf = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    builder = conf["tool"]["hatch"]["build"]["hooks"]["jupyter-builder"]
    assert builder["build-function"] == "hatch_jupyter_builder.npm_builder"
    assert builder["build-kwargs"]["build_cmd"] == "build:prod"
    assert "skip-if-exists" not in builder and "skip_if_exists" not in builder.get("build-kwargs", {})


def test_labextension_is_installed_and_enabled():
    """`pip install ./extension` ships the prebuilt labextension: JupyterLab lists it as enabled."""
    import shutil
    import subprocess
    import sys

    exe = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or shutil.which("jupyter")
    assert exe, "jupyter is not installed next to this python"
    out = subprocess.run([exe, "labextension", "list"], capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    line = next((ln for ln in text.splitlines() if "neuron-studio-lab" in ln), "")
    assert "enabled" in line and "OK" in line, text


# -- serving while busy, caching, the store's location, bounded kernel sources (issue 14, item 11) -------


async def test_slow_request_does_not_block_other_requests(jp_fetch, seeded, monkeypatch) -> None:  # noqa: ANN001
    """A handler's work runs off the event loop: while one request is busy, another is answered."""
    import asyncio
    import threading

    released = threading.Event()
    real_get_run = core.get_run

    def slow_get_run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        # a synchronous handler would hold the event loop here, so the other request could never finish
        released.wait(20)
        return real_get_run(*args, **kwargs)

    monkeypatch.setattr(core, "get_run", slow_get_run)
    slow = asyncio.ensure_future(_get(jp_fetch, "runs", str(seeded["second"]), path=seeded["path"]))
    await asyncio.sleep(0.2)
    fast = await _get(jp_fetch, "runs", path=seeded["path"])
    was_waiting = not slow.done()
    released.set()
    detail = await slow
    assert was_waiting and [r["id"] for r in fast["runs"]] == [seeded["second"], seeded["first"]]
    assert detail["run"]["id"] == seeded["second"]


async def test_timeline_is_cached_per_run_and_invalidated_on_change(jp_fetch, jp_serverapp, seeded) -> None:  # noqa: ANN001
    from neuron_studio_lab import routes

    cache = jp_serverapp.web_app.settings[routes.CACHE_SETTING]
    rid, path = str(seeded["second"]), seeded["path"]
    first = await _get(jp_fetch, "runs", rid, "timeline", path=path, bins=10)
    zoom = await _get(jp_fetch, "runs", rid, "timeline", path=path, bins=10, start_ns=0, end_ns=1000, page=0)
    assert cache.loads == 1 and len(cache) == 1
    assert first["total_ops"] == 1000 and zoom["ops"]["total"] == 22  # starts 0..1000, two per 100 ns
    # the run's table is re-saved (e.g. the cell re-profiled into the same run): the next request sees it
    store = core.run_store_module().RunStore(Path(seeded["store_root"]))
    store.save_table(seeded["second"], "device_ops", _device_ops(10))
    again = await _get(jp_fetch, "runs", rid, "timeline", path=path, bins=10)
    assert again["total_ops"] == 10 and cache.loads == 2 and len(cache) == 1


def test_run_ops_cache_is_bounded(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from neuron_studio_lab.run_cache import RunOpsCache, prepare_ops

    sorted_intervals = core.studio_module("neuron_studio.profiler.analysis.binning").SortedIntervals
    cache = RunOpsCache(max_runs=2)
    for i in range(4):
        path = tmp_path / f"{i}.parquet"
        pq.write_table(_device_ops(50 + i), path)
        got = cache.get(path, lambda p=path: prepare_ops(pq.read_table(p), sorted_intervals))
        assert got.num_rows == 50 + i
    assert len(cache) == 2 and cache.loads == 4
    small = RunOpsCache(max_runs=10, max_bytes=1)  # always keeps the newest one, never more
    for i in range(3):
        path = tmp_path / f"{i}.parquet"
        small.get(path, lambda p=path: prepare_ops(pq.read_table(p), sorted_intervals))
    assert len(small) == 1


def _brute_force_util(table: pa.Table, lo: int, hi: int, bins: int, engine: str) -> list[float]:
    # relative to lo in exact integers first: absolute ns near 1e15 have no sub-ns resolution as floats
    starts = [s - lo for s in table.column("start_ns").to_pylist()]
    ends = [e - lo for e in table.column("end_ns").to_pylist()]
    engines = table.column("engine").to_pylist()
    cores = len(set(table.column("core").to_pylist()))
    width = max(hi - lo, 1) / bins
    out = []
    for b in range(bins):
        a, z = b * width, (b + 1) * width
        busy = sum(max(0.0, min(e, z) - max(s, a)) for s, e, g in zip(starts, ends, engines) if g == engine)
        out.append(min(1.0, busy / (width * cores)))
    return out


async def test_timeline_zoom_windows_match_brute_force(jp_fetch, jp_root_dir) -> None:  # noqa: ANN001
    rng = np.random.default_rng(7)
    n = 300
    start = rng.integers(10**15, 10**15 + 50_000, n)  # large absolute ns: exact origin, no precision loss
    table = pa.table({
        "seq": np.arange(n), "name": [f"op{i}" for i in range(n)], "core": pa.array(rng.integers(0, 3, n), pa.int32()),
        "engine": rng.choice(["tensor", "vector", "dma", "none"], n).tolist(),
        "start_ns": start, "end_ns": start + rng.integers(0, 3000, n),
    })
    (jp_root_dir / "z.ipynb").write_text("{}")
    store = core.run_store_module().RunStore(jp_root_dir / ".neuron_studio")
    rid = store.begin_run(cell_source="z", options={}, **RUN_KW)
    store.save_table(rid, "device_ops", table)
    for lo, hi, bins in [(None, None, 7), (10**15 + 1000, 10**15 + 1013, 13), (10**15 - 500, 10**15 + 60_000, 5),
                         (10**15 + 20_000, 10**15 + 20_000, 1)]:
        params = {"bins": bins, "page": 0, "page_size": 1000}
        if lo is not None:
            params.update(start_ns=lo, end_ns=hi)
        data = await _get(jp_fetch, "runs", str(rid), "timeline", path="z.ipynb", **params)
        w_lo, w_hi = data["start_ns"], data["end_ns"]
        assert "none" not in data["engines"]  # ops on no engine are no track (issue 18: the spurious "none" row)
        for engine in ("tensor", "vector", "dma"):
            assert data["engines"][engine] == pytest.approx(_brute_force_util(table, w_lo, w_hi, bins, engine),
                                                            abs=2e-6), (lo, hi, engine)
        expected = sorted((s, i) for i, (s, e) in enumerate(zip(table.column("start_ns").to_pylist(),
                                                                  table.column("end_ns").to_pylist()))
                          if e >= w_lo and s <= w_hi)
        assert [r["seq"] for r in data["ops"]["rows"]] == [i for _, i in expected]


async def test_reading_runs_never_waits_for_a_writing_kernel(jp_fetch, seeded, monkeypatch) -> None:  # noqa: ANN001
    """The panel reads the store while a kernel holds SQLite's write lock (WAL: readers never wait)."""
    import time

    db = Path(seeded["store_root"]) / "runs.sqlite"
    writer = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys\n"
        f"conn = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        "conn.execute('BEGIN IMMEDIATE')\n"
        "conn.execute(\"UPDATE runs SET name = 'uncommitted'\")\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "locked"  # type: ignore[union-attr]
        monkeypatch.setattr(core.run_store_module(), "BUSY_TIMEOUT_MS", 1500)
        began = time.monotonic()
        data = await _get(jp_fetch, "runs", path=seeded["path"])
        detail = await _get(jp_fetch, "runs", str(seeded["second"]), path=seeded["path"])
        waited = time.monotonic() - began
    finally:
        writer.stdin.close()  # type: ignore[union-attr]
        writer.wait(10)
    assert [r["name"] for r in data["runs"]] == [HOSTILE, "warmup"]  # the committed state
    assert detail["run"]["id"] == seeded["second"]
    assert waited < 1.5, f"the reader waited {waited:.2f} s for the writer"


async def test_store_location_honours_neuron_studio_store(jp_fetch, jp_root_dir, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The documented variable moves the store; the panel shows the runs the kernel wrote there."""
    shared = tmp_path / "shared-store"
    monkeypatch.setenv("NEURON_STUDIO_STORE", str(shared))
    store = core.run_store_module().RunStore()  # what a kernel started with the variable uses
    assert store.root == shared
    rid = store.begin_run(cell_source="x", options={}, name="elsewhere", **RUN_KW)
    (jp_root_dir / "nb.ipynb").write_text("{}")
    data = await _get(jp_fetch, "runs", path="nb.ipynb")
    assert [r["id"] for r in data["runs"]] == [rid] and data["runs"][0]["name"] == "elsewhere"
    assert data["store"] == "$NEURON_STUDIO_STORE"  # no server path leaks
    monkeypatch.setenv("NEURON_STUDIO_STORE", "relative-store")  # relative: to the notebook's directory
    (jp_root_dir / "sub").mkdir()
    (jp_root_dir / "sub" / "nb.ipynb").write_text("{}")
    core.run_store_module().RunStore(jp_root_dir / "sub" / "relative-store")
    assert (await _get(jp_fetch, "runs", path="sub/nb.ipynb"))["store"] == "sub/relative-store"


async def test_kernel_source_is_bounded_to_source_files(jp_fetch, jp_root_dir) -> None:  # noqa: ANN001
    (jp_root_dir / "notes.txt").write_text("secret\n")
    (jp_root_dir / "data.parquet").write_bytes(b"PAR1")
    (jp_root_dir / "nb.ipynb").write_text("{}")
    for file in ("notes.txt", "data.parquet", "nb.ipynb"):
        assert await _status(jp_fetch, "kernel-source", file=file, line=1) == 415, file
    big = jp_root_dir / "huge.py"
    big.write_text("x = 1\n" * (core.MAX_SOURCE_BYTES // 6 + 10))
    assert await _status(jp_fetch, "kernel-source", file="huge.py", line=1) == 413
    (jp_root_dir / "ok.py").write_text("x = 1\n")
    assert (await _get(jp_fetch, "kernel-source", file="ok.py", line=1))["lines"] == 1
