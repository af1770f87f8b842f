"""Tutorial notebooks are stored without outputs or execution counts (diffs stay readable, no stale figures)."""
from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ has no .ipynb files"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stripped(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs"
        assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


#: Calls whose return value is bookkeeping, not something a reader should see printed under the cell.
_HOUSEKEEPING = {"gc.collect", "torch.manual_seed", "torch._dynamo.reset"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_cell_prints_a_housekeeping_value(path):
    """Walk F11: tutorial 06 printed a stray "124" (a cell ending in `gc.collect()`: IPython shows the last
    expression's value)."""
    import ast

    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or cell.source.lstrip().startswith("%%"):
            continue
        body = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        stmts = ast.parse(body).body
        last = stmts[-1] if stmts else None
        if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
            name = ast.unparse(last.value.func)
            assert name not in _HOUSEKEEPING, f"{path.name} cell {i} ends in {name}(): its value is printed"
