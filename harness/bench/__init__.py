"""Benchmark helpers (perf/): the ceilings, the case record, the entry points of the kernels and of their
comparators, the report, the regression gate and the end-to-end model. The timing helper itself is
harness/timing.py."""


class Unavailable(Exception):
    """A kernel, comparator or ceiling that cannot run here; the message says why (it becomes a skip reason
    or a comparator's recorded error)."""
