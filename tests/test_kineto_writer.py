"""The synthetic trace writer (`neuron_studio.testing.kineto_writer`): a launch's five events are valid kineto
JSON with the values given, names with `%` and quotes survive the template, and the studio's own reader takes
the streamed document back with every op, launch and kernel linked."""
from __future__ import annotations

import io
import json

from neuron_studio.testing.kineto_writer import EVENTS_PER_LAUNCH, EventStream, LaunchOp, LaunchWriter

OPS = [LaunchOp("aten::mm", [[4, 8], [8, 2]], ["float", "float"], "gemm_%d_\"q\"", flops=128),
       LaunchOp("aten::add", [[4], [4], []], ["float", "float", "Scalar"], "add_kernel<100%>")]


def _doc(detailed: bool, launches: int = 6) -> dict:
    fh = io.StringIO()
    fh.write('{"schemaVersion": 1, "traceEvents": [\n{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, '
             '"args": {"name": "python"}}')
    writer, out = LaunchWriter(OPS, pid=1, tid=1, stream=7, detailed=detailed), EventStream(fh, batch=4)
    for k in range(launches):
        out.add(writer.launch(k % 2, k, k + 1, 500 + k, 10.0 * k, 3.25, 10.0 * k + 1, 10.0 * k + 4.5, 2.0))
    out.close()
    return json.loads(fh.getvalue())


def test_a_launch_is_five_kineto_events_with_the_values_given() -> None:
    for detailed in (False, True):
        events = _doc(detailed)["traceEvents"][1:]
        assert len(events) == 6 * EVENTS_PER_LAUNCH
        cpu, launch, flow_s, kernel, flow_f = events[5:10]          # the second launch: aten::add, k = 1
        assert (cpu["cat"], cpu["name"], cpu["ts"], cpu["dur"]) == ("cpu_op", "aten::add", 10.0, 3.25)
        assert cpu["args"]["Input Dims"] == [[4], [4], []] and cpu["args"]["External id"] == 2
        assert ("Ev Idx" in cpu["args"]) is detailed and ("flops" not in cpu["args"])
        assert (launch["name"], launch["ts"], launch["args"]["correlation"]) == ("cudaLaunchKernel", 11.0, 501)
        assert (kernel["name"], kernel["ts"], kernel["dur"], kernel["tid"]) == ("add_kernel<100%>", 14.5, 2.0, 7)
        assert flow_s["id"] == flow_f["id"] == kernel["args"]["correlation"] == 501
        assert (flow_s["ts"], flow_f["ts"], flow_f["bp"]) == (11.0, 14.5, "e")
        assert events[0]["args"]["flops"] == 128 and events[3]["name"] == 'gemm_%d_"q"'


def test_the_studio_reads_the_written_trace_back(tmp_path) -> None:
    from neuron_studio.profiler.importers import read_trace

    path = tmp_path / "t.json"
    path.write_text(json.dumps(_doc(False, launches=40)))
    trace = read_trace(path)
    ops = trace.ops
    assert sorted(set(ops["name"])) == ["aten::add", "aten::mm"] and len(ops) == 40
