"""Ops inside compiled graphs carry the module they came from, named as eager names it: no module hooks run inside a
graph (they were attributed to the GraphModule the backend calls, or to nothing), so the graph's own node metadata
(Dynamo's `nn_module_stack`; a backward node's `fwd_nn_module_stack`) says which module each op belongs to."""
from __future__ import annotations

import pandas as pd
import torch
import torch.nn as nn

import neuron_studio  # noqa: F401 - registers the device
from neuron_studio.modes import GraphModulePath, graph_module_path
from neuron_studio.profiler.capture import profile


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(32, 32) for _ in range(2)])
        self.head = nn.ModuleDict({"out": nn.Linear(32, 8)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head["out"](x)


def _step():
    torch.manual_seed(0)
    model = Block().to("neuron")
    x = torch.randn(4, 32, device="neuron")

    def step() -> None:
        model(x).pow(2).mean().backward()

    return model, x, step


def _matmul_modules(ops: pd.DataFrame) -> dict[str, set[str]]:
    """Each phase's matmuls (addmm forward, mm backward): the modules they are attributed to."""
    mm = ops[ops["name"].isin(["aten::addmm", "aten::mm"])]
    return {phase: set(g["module"]) for phase, g in mm.groupby("phase")}


def test_compiled_graph_ops_are_attributed_to_their_modules_as_in_eager() -> None:
    _, _, step = _step()
    eager = profile(step, steps=2, warmup=1, mode="eager", chip="trn2").trace.ops
    compiled = profile(step, steps=2, warmup=1, mode="compile", chip="trn2").trace.ops
    in_graph = compiled[compiled["graph"] >= 0]
    assert len(in_graph) and not in_graph["module"].str.contains("GraphModule").any()
    expected = {"forward": {"Block.layers.0", "Block.layers.1", "Block.head.out"},
                "backward": {"Block.layers.0 (backward)", "Block.layers.1 (backward)", "Block.head.out (backward)"}}
    assert _matmul_modules(eager) == expected
    assert _matmul_modules(in_graph) == expected
    # every graph op's module is one eager names too (the loss's ops: top level forward, "(backward)" backward)
    assert set(in_graph["module"]) <= set(eager["module"]), set(in_graph["module"]) - set(eager["module"])


def test_a_compiled_model_inside_an_eager_step_names_its_modules_too() -> None:
    model, x, _ = _step()
    cm = torch.compile(model, backend="neuron", dynamic=False)

    def step() -> None:
        cm(x).sum().backward()

    ops = profile(step, steps=2, warmup=1, mode="eager", chip="trn2").trace.ops
    assert _matmul_modules(ops[ops["graph"] >= 0])["forward"] == {"Block.layers.0", "Block.layers.1", "Block.head.out"}


def test_graph_module_path_reads_every_source_spelling() -> None:
    def path(*entries):  # noqa: ANN002, ANN202
        p = graph_module_path({str(i): e for i, e in enumerate(entries)})
        return p.absolute, p.relative

    assert graph_module_path(None).absolute == "" and graph_module_path({}) == GraphModulePath("")
    assert path(("G['model']", Block)) == ("Block", None)
    assert path(("G['model']", Block), ("G['model'].layers.0", nn.Linear)) == ("Block.layers.0", None)
    assert path(("L['fn'].__closure__[0].cell_contents", Block),
                ("L['fn'].__closure__[0].cell_contents.head['out']", nn.Linear)) == ("Block.head.out", None)
    assert path(("G['model'].layers.0", nn.Linear)) == ("Linear", None)     # a global's submodule, called alone
    assert path(("L['m']", "torch.nn.modules.container.Sequential"),
                ("L['m']._modules['0']", "torch.nn.modules.linear.Linear")) == ("Sequential.0", None)
    # a compiled module's own forward: its sources start at its `self`, which the stack does not list
    assert path(("L['self'].layers[1]", nn.Linear)) == ("Linear", ".layers.1")
