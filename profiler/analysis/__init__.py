"""Analyses of a profile: one concern per module, each a pure function of the trace and modeled run."""
