"""Third-party data some tests read but the repository does not hold (nobody who clones it has it).

`$NEURON_STUDIO_SHARED` names a directory holding any of `traces/` (torch.profiler traces recorded by others),
`neuron-profiles/` (Neuron profiler output excerpts) and `nki-samples/` (AWS's nki-samples); without it, a
`shared/` directory next to the checkout (or above it) is used when there is one. A test that needs a missing
kind skips, naming the data and the variable; with `NEURON_STUDIO_REQUIRE_SHARED=1` (set by `.ci/run`) it fails
instead, so CI proves those tests ran. What the data protects that a generated fixture can protect is also
tested without it (tests/kineto_fixtures.py).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV_DIR = "NEURON_STUDIO_SHARED"
ENV_REQUIRE = "NEURON_STUDIO_REQUIRE_SHARED"
#: kind -> (what it is, a file that proves the directory is the right one)
KINDS = {
    "traces": ("torch.profiler traces recorded by others", "README.md"),
    "neuron-profiles": ("Neuron profiler output excerpts", None),
    "nki-samples": ("AWS's nki-samples repository", "README.md"),
}
_REPO = Path(__file__).resolve().parents[1]


def shared_path(kind: str) -> Path | None:
    """The directory of `kind`, or None when this machine does not have it."""
    if kind not in KINDS:
        raise KeyError(f"unknown shared data kind {kind!r}; known: {sorted(KINDS)}")
    proof = KINDS[kind][1]
    env = os.environ.get(ENV_DIR)
    bases = [Path(env)] if env else [p / "shared" for p in _REPO.parents]
    for base in bases:
        cand = base / kind
        if cand.is_dir() and (proof is None or (cand / proof).is_file()):
            return cand
    return None


def required() -> bool:
    return os.environ.get(ENV_REQUIRE, "") not in ("", "0")


def missing_reason(kind: str) -> str:
    what = KINDS[kind][0]
    where = (f"${ENV_DIR}={os.environ[ENV_DIR]} has no {kind}/" if os.environ.get(ENV_DIR)
             else f"no shared/{kind} next to the checkout")
    return (f"needs {what} ({kind}/), which the repository does not hold: {where}; set {ENV_DIR} to a directory "
            f"containing {kind}/ to run it")


def require(kind: str, *, module_level: bool = False) -> Path:
    """The directory of `kind`; otherwise skip the test (or module), or fail when CI requires the data."""
    path = shared_path(kind)
    if path is not None:
        return path
    reason = missing_reason(kind)
    if required():
        pytest.fail(f"{ENV_REQUIRE} is set but the test {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)
    raise AssertionError("unreachable")
