"""Capture, model, analysis and export of Neuron Studio profiles (installed as neuron_studio.profiler)."""
