"""Activates Neuron Studio in a process started by `neuron-studio run` (and in nothing else).

`neuron-studio run` puts this file's directory first on the child's PYTHONPATH and sets
NEURON_STUDIO_ACTIVATE; Python imports `sitecustomize` at start-up. This module first runs the
`sitecustomize` it shadows (if the environment has one), then, only when the variable is set, starts the
studio's capture (neuron_studio._activate.activate). A failure here is printed and never stops the program.
"""
import os
import sys


def _chain_previous() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_neuron_studio_chained_sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _chain_previous()
except Exception as _e:  # noqa: BLE001 - the shadowed sitecustomize failed; report as Python would
    print(f"Error in sitecustomize (chained by neuron-studio): {type(_e).__name__}: {_e}", file=sys.stderr)

if os.environ.get("NEURON_STUDIO_ACTIVATE"):
    try:
        from neuron_studio._activate import activate_from_env

        activate_from_env()
    except Exception as _e:  # noqa: BLE001 - never break the user's program
        print(f"neuron-studio: could not activate profiling in this process: {type(_e).__name__}: {_e}",
              file=sys.stderr)
