"""One source of truth for hardware figures: specs.json behind `neuron_studio.hardware`, nowhere else.

Two halves:
- a scanner over the product's Python (and JSON) source that fails if a chip figure is defined outside the
  accessor: a table keyed by chip name holding numbers, a constant named after a chip, or a literal equal to one
  of the documented figures (also in the usual scaled units: GHz, TFLOPS, GB/s, GiB, KiB). The scanner is
  proven on synthetic snippets (the tables that used to live in kernels/cost.py, device/targets.py and the
  interpreter), so a re-introduced table fails this test;
- checks that the kernel cost model, the interpreter's limits, the device targets and the op model read the
  accessor's values (an override through the accessor moves them, and their figures equal the accessor's).
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import operator
import re
from pathlib import Path

import numpy as np
import pytest

from neuron_studio.hardware import SPECS_PATH, ChipSpec, chip_spec, trainium_chips

ROOT = Path(__file__).resolve().parents[1]
SCANNED_DIRS = ("neuron_studio", "profiler", "kernels", "extension/neuron_studio_lab")
ACCESSOR_DIR = ROOT / "neuron_studio" / "hardware"
_BINOPS = {ast.Mult: operator.mul, ast.Pow: operator.pow, ast.Div: operator.truediv, ast.Add: operator.add,
           ast.Sub: operator.sub}
# nl.tile_size attribute names, and tokens of constant names that denote a hardware limit or rate.
_TILE_LIMIT_NAMES = {"pmax", "psum_fmax", "psum_bank_fmax", "psum_num_banks", "gemm_stationary_fmax",
                     "gemm_moving_fmax", "sbuf_size_bytes", "sbuf_fmax"}
_LIMIT_RE = re.compile(r"(^|_)(PMAX|FMAX|PSUM|SBUF|PARTITIONS?|LNC|CLOCK|GHZ|FLOPS|TFLOPS|NEURON_?CORES)(_|$)")
_SCALES = (1.0, 1e3, 1e6, 1e9, 1e12, 2.0**10, 2.0**20, 2.0**30, 2.0**40)


def _chip_names() -> set[str]:
    return set(json.loads(SPECS_PATH.read_text())["chips"])


def _is_unit(v: float) -> bool:
    """Powers of ten and of two are unit conversions (1e9 ns/s, 2**30 B/GiB), not figures."""
    if v <= 0:
        return True
    return any(abs(math.log(v, base) - round(math.log(v, base))) < 1e-9 for base in (2, 10))


def _significant_digits(v: float) -> int:
    return len(f"{v:.9g}".split("e")[0].replace(".", "").replace("-", "").strip("0"))


def _distinctive(v: float, scaled: bool) -> bool:
    """A value that does not occur by accident in code.

    Base-unit figures count when large (clocks, FLOP/s, bytes, bytes/s) or fractional (prices); scaled forms
    (2.9 TB/s, 2.4 GHz, 880 GB/s) only with two or more significant digits and, if whole, from 100 up, so 0.9
    efficiencies, 24-hour days, 128-wide tiles and 8 banks do not trip it. Small round numbers next to a chip
    name (79 TFLOPS in a table keyed by 'trn2') are caught by the table rules.
    """
    if _is_unit(v) or v < 0.05:
        return False
    if scaled:   # 2.9 (TB/s), 1.12 (GHz), 880 (GB/s), 667 (TFLOPS); not 24 or 0.9, which code uses for anything
        return _significant_digits(v) >= 2 and (v != math.floor(v) or v >= 100)
    return v >= 1e5 or v != math.floor(v)


def figure_values() -> set[float]:
    """Every figure of the spec file, and what the accessor derives from them (SBUF per partition, per-core
    shares), in base units and in the usual scaled units."""
    base: set[float] = set()
    for name, chip in json.loads(SPECS_PATH.read_text())["chips"].items():
        for fig in chip["figures"].values():
            base.update(float(v) for v in (fig["value"] if isinstance(fig["value"], list) else [fig["value"]]))
        spec = chip_spec(name)
        base.update(float(v) for v in (spec.sbuf_bytes_per_partition, spec.psum_bank_bytes_per_partition)
                    if v is not None)
        for lnc in spec.lnc_allowed:
            base.update(float(v) for v in dataclasses.astuple(spec.core(lnc)))
    out: set[float] = set()
    for v in base:
        for s in _SCALES:
            if _distinctive(v / s, scaled=s != 1.0):
                out.add(round(v / s, 9))
    return out


def _const_value(node: ast.AST) -> float | None:
    """Numeric value of a literal or of a constant expression such as `32 * 2**30`, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _const_value(node.operand)
        return None if v is None else -v
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Pow, ast.Div, ast.Add, ast.Sub)):
        a, b = _const_value(node.left), _const_value(node.right)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Pow) and abs(b) > 64:
            return None
        try:
            return float(_BINOPS[type(node.op)](a, b))
        except (ArithmeticError, ValueError):
            return None
    return None


def _holds_number(node: ast.AST) -> bool:
    return any(_const_value(n) is not None for n in ast.walk(node))


def find_chip_figures(source: str, filename: str = "<snippet>") -> list[str]:
    """Places in `source` that define a chip figure (empty = clean). Each item: 'file:line: why'."""
    chips = _chip_names()
    chip_re = re.compile(r"(^|_)(" + "|".join(sorted(c.upper() for c in chips)) + r"|TRAINIUM\d?)(_|$)")
    values = figure_values()
    tree = ast.parse(source, filename)
    hits: list[str] = []
    folded: set[int] = set()   # nodes inside an already-checked constant expression
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.lower() in chips \
                        and _holds_number(v):
                    hits.append(f"{where}: table keyed by chip {k.value!r} holds numbers")
                    break
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg and kw.arg.lower() in chips and _holds_number(kw.value):
                    hits.append(f"{where}: chip {kw.arg!r} given numbers")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            consts = [n for n in names if n.isupper() and chip_re.search(n)]   # module constants: UPPER_CASE
            limits = [n for n in names if n in _TILE_LIMIT_NAMES or (n.isupper() and _LIMIT_RE.search(n))]
            if node.value is not None and consts and _holds_number(node.value):
                hits.append(f"{where}: constant {consts[0]!r} named after a chip holds numbers")
            elif node.value is not None and limits and _holds_number(node.value):
                hits.append(f"{where}: hardware limit {limits[0]!r} given a number")
        if id(node) in folded:
            continue
        value = _const_value(node)
        if value is not None:
            folded.update(id(n) for n in ast.walk(node))
            if round(abs(value), 9) in values:
                text = ast.get_source_segment(source, node) or ast.unparse(node)
                hits.append(f"{where}: literal {text} equals a figure of specs.json")
    return hits


def find_chip_tables_json(doc: object, filename: str) -> list[str]:
    """A JSON document with a 'chips' section or an object keyed by chip name that holds numbers."""
    chips = _chip_names()
    hits: list[str] = []

    def numbers(x: object) -> bool:
        if isinstance(x, dict):
            return any(numbers(v) for v in x.values())
        if isinstance(x, list):
            return any(numbers(v) for v in x)
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    def walk(x: object, path: str) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "chips" or (k.lower() in chips and numbers(v)):
                    hits.append(f"{filename}: {path}/{k} defines chip figures")
                walk(v, f"{path}/{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]")

    walk(doc, "")
    return hits


def _product_files(ext: str) -> list[Path]:
    files: list[Path] = []
    for d in SCANNED_DIRS:
        files += [p for p in (ROOT / d).rglob(f"*.{ext}")
                  if ACCESSOR_DIR not in p.parents and "node_modules" not in p.parts and ".venv" not in p.parts]
    return sorted(files)


# ---- the scanner catches what it is meant to catch (self-check on synthetic snippets) ----

OLD_COST_TABLE = '''
CHIPS = {
    "trn2": {"cores": 8, "pe_clock_ghz": 2.4, "pe_bf16_tflops": 79.0, "scalar_elems": 128,
             "dma_gbps_chip": 3500.0, "hbm_gbps_chip": 2900.0},
}
'''
OLD_TARGETS_TABLE = '''
_CHIPS = {"trn1": ("Trainium", 2, 1, (1,), 32 * 2**30)}
'''
OLD_INTERPRETER_TABLE = '''
SBUF_BYTES_PER_PARTITION = {"trn1": 192 * 1024, "trn2": 224 * 1024, "trn3": 256 * 1024}
'''


@pytest.mark.parametrize("snippet, why", [
    (OLD_COST_TABLE, "table keyed by chip 'trn2'"),
    (OLD_TARGETS_TABLE, "table keyed by chip 'trn1'"),
    (OLD_INTERPRETER_TABLE, "table keyed by chip"),
    ("TRN2_SCALAR_ELEMS = 128\n", "named after a chip"),
    ("def f(x):\n    return x / 2.9e12\n", "literal 2.9e12"),                  # Trn2 HBM bytes/s
    ("hbm_tbps = 4.9\n", "literal 4.9"),                                        # Trn3 HBM in TB/s
    ("HBM = 96 * 2**30\n", "literal 96 * 2**30"),                             # Trn2 HBM capacity
    ("SBUF = 224 * 1024\n", "literal 224 * 1024"),                              # Trn2 SBUF per partition
    ("clock_ghz = 1.12\n", "literal 1.12"),                                     # Trn1 Vector clock
    ("spec = dict(trn3=(8, 2))\n", "chip 'trn3' given numbers"),
    ("PMAX = 128\nPSUM_BANK_BYTES = 2048\n", "limit 'PMAX'"),                # the old interpreter constants
    ("GEMM_MOVING_FMAX = 512\n", "limit 'GEMM_MOVING_FMAX'"),
    ("class tile_size:\n    pmax = 128\n", "limit 'pmax'"),
])
def test_scanner_catches_a_reintroduced_figure(snippet: str, why: str) -> None:
    hits = find_chip_figures(snippet)
    assert hits and any(why in h for h in hits), hits


def test_scanner_passes_code_that_reads_the_accessor() -> None:
    clean = '''
from neuron_studio.hardware import chip_spec
CHIP_NAMES = ("trn1", "trn2", "trn3")
ENV_LNC = "NEURON_LOGICAL_NC_CONFIG"
P = nl.tile_size.pmax
def per_core_hbm(chip: str) -> float:
    spec = chip_spec(chip)
    return spec.core(1).hbm_bytes / 1e9 * 128 / 2 + 0.5
'''
    assert find_chip_figures(clean) == []


def test_json_scanner_catches_a_second_spec_file() -> None:
    assert find_chip_tables_json({"chips": {"trn2": {"figures": {}}}}, "x.json")
    assert find_chip_tables_json({"limits": {"trn1": {"sbuf": 196608}}}, "y.json")
    assert find_chip_tables_json({"version": 1, "fallback_ops": {"aten::foo": "rng"}}, "z.json") == []


# ---- the product source holds no chip figure outside the accessor ----

def test_no_chip_figure_outside_the_accessor() -> None:
    py = _product_files("py")
    assert len(py) > 50 and any(p.name == "cost.py" for p in py)   # the scan really covers the product
    hits: list[str] = []
    for p in py:
        hits += find_chip_figures(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))
    for p in _product_files("json"):
        hits += find_chip_tables_json(json.loads(p.read_text(encoding="utf-8")), str(p.relative_to(ROOT)))
    assert not hits, "chip figures defined outside neuron_studio/hardware/specs.json:\n" + "\n".join(hits)


def test_the_only_spec_file_is_shipped_as_package_data() -> None:
    assert SPECS_PATH.parent == ACCESSOR_DIR and SPECS_PATH.name == "specs.json"
    text = (ROOT / "pyproject.toml").read_text()
    assert '"neuron_studio.hardware"' in text and '"*.json"' in text


def test_accessor_is_a_stdlib_leaf() -> None:
    """device, profiler and kernels may all import it only if it imports nothing of theirs."""
    for p in ACCESSOR_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert node.module.split(".")[0] != "neuron_studio" or node.module.startswith(
                    "neuron_studio.hardware"), (p.name, node.module)
                assert node.module.split(".")[0] in ("__future__", "neuron_studio", "dataclasses", "functools",
                                                     "json", "math", "pathlib", "types", "typing"), node.module
            elif isinstance(node, ast.Import):
                assert all(a.name in ("dataclasses", "functools", "json", "math") for a in node.names)


# ---- every consumer reads the accessor's values ----

@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
def test_device_targets_read_the_accessor(chip: str) -> None:
    from neuron_studio.device.targets import TARGETS, target_for
    spec = chip_spec(chip)
    assert TARGETS == trainium_chips()
    t = target_for(chip)
    assert (t.physical_cores, t.lnc, t.hbm_bytes) == (spec.neuron_cores_per_chip, spec.lnc_default,
                                                      spec.hbm_capacity_bytes)
    assert t.logical_cores == spec.logical_cores_per_chip() == spec.core().cores_per_chip
    for lnc in spec.lnc_allowed:
        assert target_for(chip, lnc).logical_cores == spec.core(lnc).cores_per_chip


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
def test_interpreter_limits_read_the_accessor(chip: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from neuron_studio.kernels.interpreter import language as nl
    from neuron_studio.kernels.interpreter.errors import NkiRuleError
    from neuron_studio.kernels.interpreter.jit import JitKernel
    from neuron_studio.kernels.interpreter.state import CallState, call_scope
    from neuron_studio.kernels.interpreter.trace import KernelTrace
    spec = chip_spec(chip)
    state = CallState(KernelTrace(kernel="k", chip=chip))
    assert state.spec == spec
    assert state.sbuf_capacity == spec.sbuf_bytes_per_core // spec.sbuf_partitions
    with call_scope(state):
        assert (nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax,
                nl.tile_size.psum_num_banks) == (spec.sbuf_partitions, spec.gemm_stationary_fmax,
                                                 spec.gemm_moving_fmax, spec.psum_banks)
        assert nl.tile_size.psum_fmax * 4 * spec.psum_banks * spec.sbuf_partitions == spec.psum_bytes_per_core
    # A (hypothetical) chip with 64 partitions and a 256-wide moving tile: the rules move with the accessor.
    small = dataclasses.replace(spec, sbuf_partitions=64, gemm_moving_fmax=256)
    monkeypatch.setattr("neuron_studio.kernels.interpreter.state.chip_spec", lambda name: small)

    def too_wide(a):
        t = nl.ndarray((65, 4), dtype=nl.float32)
        return t
    with pytest.raises(NkiRuleError, match="exceeds pmax=64"):
        JitKernel(too_wide).run(np.zeros((1, 1), np.float32), chip=chip)


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
def test_kernel_cost_model_reads_the_accessor(chip: str) -> None:
    from neuron_studio.kernels import cost
    spec = chip_spec(chip)
    core = spec.core(1)   # a kernel runs on one physical core (the accessor's convention)
    assert cost.kernel_core(chip) == (spec, core)
    assert core.hbm_bytes == spec.hbm_bandwidth_bytes_per_s / spec.neuron_cores_per_chip
    # Scalar Engine on 16-bit data: the documented width (Trn3: 256/cycle, which kernels/cost.py had as 128).
    ns = cost.instruction_ns("scalar", "bfloat16", 1 << 20, 0, 0, 0, spec)
    overhead = spec.scalar_static_overhead_cycles / (spec.scalar_clock_hz / 1e9)
    assert ns - overhead == pytest.approx((1 << 20) / (spec.scalar_elems_per_cycle_16bit * spec.scalar_clock_hz / 1e9))
    # Overriding a figure through the accessor moves the kernel model.
    fast = chip_spec(chip, overrides={"core_dma_bandwidth_bytes_per_s": 2 * spec.core_dma_bandwidth_bytes_per_s,
                                      "hbm_bandwidth_bytes_per_s": 4 * spec.hbm_bandwidth_bytes_per_s})
    # 128 partitions x 64 KiB, one contiguous run per DMA engine: each engine moves 1/16 at its rate
    dma = lambda s: cost.instruction_ns("dma", "bfloat16", 0, 0, 1 << 23, 0, s,  # noqa: E731
                                        partitions=(0, 128), descriptors=s.dma_engines_per_core)
    o = spec.dma_descriptor_overhead_ns
    assert dma(spec) - o == pytest.approx(2 * (dma(fast) - o))
    assert dma(spec) == pytest.approx((1 << 23) / spec.core_dma_bandwidth_bytes_per_s * 1e9 + o)
    assert cost.roofline_ns(0, 1 << 23, fast) == pytest.approx(dma(fast) - o)


def test_trn3_scalar_figure_unified() -> None:
    """The disagreement issue 13 names: Trn3 Scalar Engine 16-bit width is the documented 256, everywhere."""
    from neuron_studio.kernels import cost
    trn2, trn3 = chip_spec("trn2"), chip_spec("trn3")
    assert trn3.scalar_elems_per_cycle_16bit == 256 and trn3.scalar_elems_per_cycle_32bit == 128
    # Same clock (1.2 GHz) on both chips: the Trn3 16-bit Scalar instruction streams twice as fast.
    t2 = cost.instruction_ns("scalar", "bfloat16", 1 << 20, 0, 0, 0, trn2)
    t3 = cost.instruction_ns("scalar", "bfloat16", 1 << 20, 0, 0, 0, trn3)
    over = trn2.scalar_static_overhead_cycles / 1.2
    assert (t2 - over) == pytest.approx(2 * (t3 - over))


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3", "h100"])
def test_op_model_reads_the_accessor(chip: str) -> None:
    from neuron_studio.profiler.model.config import ModelConfig
    from neuron_studio.profiler.model.schedule import core_rates
    spec = chip_spec(chip)
    rates = core_rates(spec, ModelConfig())
    core = spec.core()
    assert rates.lnc == core.lnc == spec.lnc_default
    assert rates.tensor_flops == (core.tensor_bf16_flops, core.tensor_fp8_flops, core.tensor_fp32_flops,
                                  core.tensor_mxfp8_flops)
    assert rates.tensor_flops[0] == spec.core_tensor_bf16_flops_per_s * spec.lnc_default
    # streaming rate: the core's HBM share, limited by its own DMA engines where the spec gives them
    assert rates.hbm_bytes == core.stream_bytes <= spec.hbm_bandwidth_bytes_per_s / spec.logical_cores_per_chip()
    assert rates.scalar_elems == (core.scalar_elems_32bit, core.scalar_elems_16bit)


def test_op_and_kernel_models_count_cores_the_same_way() -> None:
    """One convention: a logical core of LNC physical cores = LNC x one physical core (compute and bandwidth)."""
    from neuron_studio.kernels import cost
    from neuron_studio.profiler.model.config import ModelConfig
    from neuron_studio.profiler.model.schedule import core_rates
    for chip in trainium_chips():
        spec = chip_spec(chip)
        _, physical = cost.kernel_core(chip)
        for lnc in spec.lnc_allowed:
            rates = core_rates(spec, ModelConfig(lnc=lnc))
            assert rates.tensor_flops[0] == pytest.approx(lnc * physical.tensor_bf16_flops)
            assert rates.vector_elems[1] == pytest.approx(lnc * physical.vector_elems_16bit)
            assert rates.hbm_bytes == pytest.approx(lnc * physical.stream_bytes)
            assert rates.dma_bytes == pytest.approx(lnc * physical.dma_bytes)


def test_op_model_rejects_an_lnc_the_chip_does_not_allow() -> None:
    from neuron_studio.profiler.model.config import ConfigError, ModelConfig
    from neuron_studio.profiler.model.schedule import core_rates
    with pytest.raises(ConfigError, match=r"LNC=4 is not valid on trn2; valid: \(1, 2\)"):
        core_rates(chip_spec("trn2"), ModelConfig(lnc=4))


def test_profiler_specs_is_the_same_accessor() -> None:
    from neuron_studio.profiler import specs as old
    assert old.chip_spec is chip_spec and old.ChipSpec is ChipSpec and old.SPECS_PATH == SPECS_PATH
