"""The README's examples run as written (last wave the "Without IPython" example used an undefined
`train_step`)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _block_after(marker: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    i = text.index(marker)
    m = re.compile(r"```python\n(.*?)```", re.S).search(text, i)
    assert m is not None, f"no python block after {marker!r}"
    return m.group(1)


def test_without_ipython_example_runs_as_written(tmp_path: Path) -> None:
    code = _block_after("Without IPython")
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NEURON_STUDIO_STORE": str(tmp_path / "store")}
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "aten::" in r.stdout            # the op table printed


def test_calibration_claim_is_what_the_data_says() -> None:
    """The README's per-chip calibration figures are the ones a profile's badge states (they drifted once:
    the README kept '0.78–1.23× on every row' after the Trn2 rows changed the fit)."""
    from neuron_studio.profiler.model.calibration import calibration_summary

    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for chip in ("trn2", "trn1"):
        s = calibration_summary(chip)
        m = re.search(rf"\*\*{chip}\*\* (\d+) rows at (?:modeled/published )?(\d\.\d\d)–(\d\.\d\d)× "
                      rf"\((?:geometric-mean error )?(\d\.\d\d)×\)", text)
        assert m is not None, f"README states no calibration figures for {chip}"
        assert (int(m.group(1)), m.group(2), m.group(3), m.group(4)) == (
            s.n_rows, f"{s.lo:.2f}", f"{s.hi:.2f}", f"{s.geomean:.2f}"), (chip, m.group(0), s.text)
    assert calibration_summary("trn3").n_rows == 0 and "not validated" in text
