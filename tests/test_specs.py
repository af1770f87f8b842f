"""Hardware spec file: every figure sourced, validation errors typed and named, overrides applied."""
from __future__ import annotations

import json

import pytest

from neuron_studio.profiler.specs import FIGURE_FIELDS, SPECS_PATH, ChipSpec, SpecError, available_chips, chip_spec


def test_available_chips() -> None:
    assert available_chips() == ["h100", "trn1", "trn2", "trn3"]


@pytest.mark.parametrize("name", ["trn1", "trn2", "trn3", "h100"])
def test_every_figure_has_a_source(name: str) -> None:
    spec = chip_spec(name)
    assert isinstance(spec, ChipSpec)
    for f in FIGURE_FIELDS:
        if getattr(spec, f) is not None:
            assert spec.sources.get(f), f"{name}.{f} has no source"


def test_documented_figures() -> None:
    trn2 = chip_spec("trn2")
    assert trn2.neuron_cores_per_chip == 8 and trn2.lnc_default == 2
    assert trn2.core_tensor_bf16_flops_per_s == 79e12
    assert trn2.core_tensor_fp8_flops_per_s == 2 * trn2.core_tensor_bf16_flops_per_s
    assert trn2.hbm_bandwidth_bytes_per_s == 2.9e12
    assert "3 TB/s" in trn2.notes["hbm_bandwidth_bytes_per_s"]   # the disagreement is recorded
    trn3 = chip_spec("trn3")
    assert trn3.hbm_bandwidth_bytes_per_s == 4.9e12
    assert "4.7" in trn3.notes["hbm_bandwidth_bytes_per_s"]
    trn1 = chip_spec("trn1")
    assert trn1.core_tensor_fp8_flops_per_s == trn1.core_tensor_bf16_flops_per_s   # no FP8 speed-up
    assert trn1.tensor_engine_rows == trn1.tensor_engine_cols == 128
    h100 = chip_spec("h100")
    assert (h100.peak_bf16_flops_per_s, h100.peak_fp8_flops_per_s, h100.peak_fp32_flops_per_s) == (989e12, 1979e12, 67e12)
    assert h100.hbm_bandwidth_bytes_per_s == 3.35e12 and h100.hbm_capacity_bytes == 80e9
    assert trn2.price_per_chip_hour_usd == 2.235 and h100.price_per_chip_hour_usd == 5.970
    assert chip_spec("trn1").price_per_chip_hour_usd > 0 and "assumed" in chip_spec("trn3").sources["price_per_chip_hour_usd"]


def test_tensor_engine_consistency() -> None:
    """128×128 PEs × 2 FLOP × clock ≈ the per-core BF16 figure (within 2%)."""
    for name in ("trn1", "trn2", "trn3"):
        s = chip_spec(name)
        derived = s.tensor_engine_rows * s.tensor_engine_cols * 2 * s.tensor_engine_clock_hz
        assert abs(derived / s.core_tensor_bf16_flops_per_s - 1) < 0.02, name


def test_override_applies_and_is_labelled() -> None:
    s = chip_spec("trn2", overrides={"hbm_bandwidth_bytes_per_s": 3.0e12})
    assert s.hbm_bandwidth_bytes_per_s == 3.0e12
    assert s.sources["hbm_bandwidth_bytes_per_s"] == "user override"
    assert chip_spec("trn2").hbm_bandwidth_bytes_per_s == 2.9e12   # no shared state mutated


def test_unknown_chip_names_valid_ones() -> None:
    with pytest.raises(SpecError, match="trn2"):
        chip_spec("trn9")


def test_bad_override_key_and_value() -> None:
    with pytest.raises(SpecError, match="hbm_bandwith.*valid"):
        chip_spec("trn2", overrides={"hbm_bandwith": 1.0})
    with pytest.raises(SpecError, match="positive"):
        chip_spec("trn2", overrides={"hbm_bandwidth_bytes_per_s": -1.0})
    with pytest.raises(SpecError, match="integer"):
        chip_spec("trn2", overrides={"neuron_cores_per_chip": 2.5})


def test_malformed_file_is_rejected(tmp_path) -> None:
    doc = json.loads(SPECS_PATH.read_text())
    del doc["chips"]["trn2"]["figures"]["hbm_bandwidth_bytes_per_s"]["source"]
    p = tmp_path / "specs.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match="source"):
        chip_spec("trn2", path=p)
    p.write_text("{not json")
    with pytest.raises(SpecError):
        chip_spec("trn2", path=p)


def test_tile_limits_and_lnc_come_from_the_file() -> None:
    """Tile limits documented in nki.language.tile_size / the architecture guides (trainium.md §4.2, §6)."""
    for name, sbuf_kib in (("trn1", 192), ("trn2", 224), ("trn3", 256)):
        s = chip_spec(name)
        assert s.sbuf_bytes_per_partition == sbuf_kib * 1024
        assert (s.partition_max, s.psum_banks, s.psum_bank_bytes_per_partition, s.psum_bank_fmax) == (128, 8, 2048, 512)
        assert (s.gemm_stationary_fmax, s.gemm_moving_fmax) == (128, 512)
        assert s.sources["gemm_moving_fmax"].endswith("nki.language.tile_size.rst (gemm_moving_fmax)")
    assert chip_spec("trn1").lnc_allowed == (1,) and chip_spec("trn2").lnc_allowed == (1, 2)
    assert chip_spec("h100").partition_max is None and chip_spec("h100").sbuf_bytes_per_partition is None


def test_core_convention() -> None:
    """Logical core = LNC physical cores; chip bandwidth shared by the chip's cores of that size."""
    s = chip_spec("trn2")
    one, two = s.core(1), s.core(2)
    assert s.core() == two and (one.cores_per_chip, two.cores_per_chip) == (8, 4)
    assert two.tensor_bf16_flops == 2 * one.tensor_bf16_flops == 2 * s.core_tensor_bf16_flops_per_s
    assert two.hbm_bytes == 2 * one.hbm_bytes == s.hbm_bandwidth_bytes_per_s / 4   # ≈0.73 TB/s (trainium.md §6)
    assert abs(two.hbm_bytes - 0.725e12) < 1e9
    with pytest.raises(SpecError, match=r"LNC=4 is not valid on trn2; valid: \(1, 2\)"):
        s.core(4)


def test_inconsistent_figures_are_rejected(tmp_path) -> None:
    doc = json.loads(SPECS_PATH.read_text())
    doc["chips"]["trn2"]["figures"]["lnc_allowed"]["value"] = [1]          # default LNC=2 no longer allowed
    p = tmp_path / "specs.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match="lnc_default=2 is not in lnc_allowed"):
        chip_spec("trn2", path=p)
    doc = json.loads(SPECS_PATH.read_text())
    del doc["chips"]["trn3"]["figures"]["psum_banks"]                       # the interpreter needs it
    p.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match="Trainium chip needs figure.*psum_banks"):
        chip_spec("trn3", path=p)
    with pytest.raises(SpecError, match="inconsistent"):
        chip_spec("trn2", overrides={"lnc_default": 1, "lnc_allowed": [3]})
    with pytest.raises(SpecError, match="positive integers"):
        chip_spec("trn2", overrides={"lnc_allowed": [1, 2.5]})


def test_shared_spec_is_read_only_and_copies_cleanly() -> None:
    import copy
    import pickle
    s = chip_spec("trn2")
    with pytest.raises(TypeError):
        s.sources["hbm_bandwidth_bytes_per_s"] = "edited"      # the cached record cannot be corrupted
    for clone in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert clone == s and dict(clone.sources) == dict(s.sources) and dict(clone.notes) == dict(s.notes)
