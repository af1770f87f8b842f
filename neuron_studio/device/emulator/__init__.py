"""The emulated `neuron` device: pure Python, executes on CPU, reports what ran as OpEvents."""
