"""CS149's Trainium2 assignment kernels (xaviergonzalez/asst4-trainium2, `part1/kernels.py` @6007a418), run
unmodified on the NKI interpreter for the calibration rows `kernel:cs149_*`.

The repository carries no licence, so the studio does not ship its kernels: they are read at benchmark time
from a checkout the user provides (`--cs149 PATH` or NEURON_STUDIO_CS149_REPO; a work tree or a git directory)
and checked against the published file's git blob id. The only change is the one the assignment asks the
student to make and the write-up reports: the value of `ROW_CHUNK` (vector_add_tiled, step 1) or `FREE_DIM`
(vector_add_stream, steps 2a/2b). Inputs are as the assignment's run_benchmark.py makes them: two float32
vectors of `n` elements from np.random.rand.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import types
from pathlib import Path
from typing import Any

import numpy as np

from neuron_studio.hardware import chip_spec
from neuron_studio.kernels import kernel_time
from neuron_studio.kernels.interpreter import nki_imports
from neuron_studio.profiler.model.calibration import CalibrationRow

__all__ = ["CS149_COMMIT", "CS149_BLOB", "Cs149Unavailable", "set_repo", "load_kernels", "model"]

CS149_COMMIT = "6007a4180e1433b8edfb2deaa59c73d6bef8cd6e"
CS149_BLOB = "b6eb7094b63413826b52e539887c0eecb4a7fcf5"  # git blob id of part1/kernels.py at that commit
_PATH = "part1/kernels.py"
# The assignment's own edit points (the only lines changed), per kernel
_KNOBS = {"vector_add_tiled": ("ROW_CHUNK", 256), "vector_add_stream": ("FREE_DIM", 2)}
_repo: str | None = None


class Cs149Unavailable(RuntimeError):
    """No checkout of the CS149 repository was given (its kernels are not shipped with the studio)."""


def set_repo(path: str | None) -> None:
    global _repo
    _repo = path


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _source() -> str:
    repo = _repo or os.environ.get("NEURON_STUDIO_CS149_REPO")
    if not repo:
        raise Cs149Unavailable("the cs149_* rows need a checkout of xaviergonzalez/asst4-trainium2 (its kernels "
                               "carry no licence, so the studio does not ship them): pass --cs149 PATH or set "
                               "NEURON_STUDIO_CS149_REPO")
    work_tree = Path(repo) / _PATH
    if work_tree.is_file():
        data = work_tree.read_bytes()
    else:
        try:
            data = subprocess.run(["git", "--git-dir", repo, "show", f"{CS149_COMMIT}:{_PATH}"], check=True,
                                  capture_output=True).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            raise Cs149Unavailable(f"cannot read {_PATH} @{CS149_COMMIT[:8]} from {repo}: {exc}") from exc
    if _blob_id(data) != CS149_BLOB:
        raise Cs149Unavailable(f"{repo}: {_PATH} is not the published file (git blob {CS149_BLOB[:12]} at "
                               f"{CS149_COMMIT[:8]}); check out that commit")
    return data.decode("utf-8")


def load_kernels(kernel: str, value: int) -> types.ModuleType:
    """The published kernels module with the assignment's knob of `kernel` set to `value`."""
    knob, default = _KNOBS[kernel]
    src, n = re.subn(rf"^(\s*){knob} = {default}$", rf"\g<1>{knob} = {int(value)}", _source(), count=1,
                     flags=re.MULTILINE)
    if n != 1:
        raise Cs149Unavailable(f"{_PATH}: no line '{knob} = {default}' to set")
    nki_imports.install()  # `import neuronxcc.nki` resolves to the interpreter when Neuron is absent
    mod = types.ModuleType(f"cs149_kernels_{kernel}_{value}")
    mod.__file__ = f"{_repo or 'asst4-trainium2'}/{_PATH}"
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - the published, hash-checked source
    return mod


def model(row: CalibrationRow) -> float:
    """Modeled time (µs) of one CS149 row: `config` names the kernel, the knob's value and `n`; a row measured
    from a profile compiled with --disable-dge (the assignment's profiling runs) is modeled without the
    descriptor generation cost."""
    cfg: dict[str, Any] = dict(row.config)
    kernel = cfg["kernel"]
    knob, _ = _KNOBS[kernel]
    mod = load_kernels(kernel, cfg[knob])
    rng = np.random.default_rng(0)
    a = rng.random(cfg["n"]).astype(np.float32)
    b = rng.random(cfg["n"]).astype(np.float32)
    out, trace = getattr(mod, kernel).run(a, b, chip=row.chip)
    if not np.allclose(out, a + b):
        raise RuntimeError(f"{row.id}: the CS149 kernel's result differs from a + b")
    spec = chip_spec(row.chip)
    if cfg.get("compile_options") == "--disable-dge":
        import dataclasses
        spec = dataclasses.replace(spec, dge_instruction_ns=None)
    return kernel_time(trace, spec).total_ns / 1e3
