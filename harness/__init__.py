"""Importable helpers of the conformance harness: comparison, clause registry, device probe, reporting,
hypothesis strategies. Tests import from here, never from a conftest."""
