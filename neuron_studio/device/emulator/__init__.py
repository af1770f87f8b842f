"""The emulated `neuron` device: a C++ PrivateUse1 backend (csrc/) whose memory is host memory; an op runs as the
CPU kernel on the same bytes, and what ran is reported as OpEvents."""
