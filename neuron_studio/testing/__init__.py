"""Synthetic torch.profiler (kineto) traces written by the studio itself, for its tests and benchmarks and for
users' own tests of code that reads traces: `kineto_writer` (a launch's events as kineto writes them, streamed)
and `synthetic_job` (a many-rank job with collectives, clock skew and a straggler)."""
