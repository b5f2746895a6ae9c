"""The greedy-equivalence rule of harness/decoding.py (spec/engine.md EN.4): near-tie divergences are
allowed, counted and resumed from the reference token; others fail."""

import numpy as np

from harness import decoding


def run(tokens, margins):
    return {"tokens": np.array(tokens, np.int32), "margins": np.array(margins, np.float32)}


def test_identical_runs_compare_every_token():
    ref = run([[1, 2, 3, 4], [5, 6, 7, 8]], np.ones((2, 4)))
    eq = decoding.greedy_equivalence([[0], [0]], 4, ref, ref, rerun=None)
    assert eq.compared == 8 and not eq.allowed and not eq.failures


def test_a_clear_divergence_fails():
    ref, got = run([[1, 2, 3, 4]], [[1, 1, 0.5, 1]]), run([[1, 2, 9, 9]], [[1, 1, 1, 1]])
    eq = decoding.greedy_equivalence([[7]], 4, ref, got, rerun=None)
    assert eq.failures == [(0, 2, 0.5)] and not eq.allowed


def test_a_near_tie_is_counted_and_resumed_from_the_reference_token():
    ref, got = run([[1, 2, 3, 4]], [[1, 1, 1e-4, 1]]), run([[1, 2, 9, 9]], [[1, 1, 1, 1]])
    calls = []

    def rerun(prompts, n):
        calls.append((prompts, n))
        return run([[4]], [[1]]), run([[4]], [[1]])

    eq = decoding.greedy_equivalence([[7]], 4, ref, got, rerun)
    assert calls == [([[7, 1, 2, 3]], 1)]
    assert len(eq.allowed) == 1 and eq.allowed[0][:2] == (0, 2) and not eq.failures
    assert eq.compared == 4
