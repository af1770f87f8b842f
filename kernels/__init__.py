"""NKI kernels, the NKI interpreter and the op->kernel registry (installed as neuron_studio.kernels)."""
