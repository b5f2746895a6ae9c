"""lab.tree_verify_handover_model: sm90a's warpgroup hand-overs hold in every interleaving, and the checker finds a
broken protocol (each break below is a real way to get the reordering of a design wrong)."""

import pytest

from lab import tree_verify_handover_model as hm


@pytest.mark.parametrize("early_max", [False, True], ids=["default", "early_max"])
@pytest.mark.parametrize("nblk", range(1, 7))
def test_the_protocols_hold(nblk, early_max):
    assert hm.check(nblk, early_max) == []


def _without(steps, step):
    out = list(steps)
    out.remove(step)
    return out


def _moved_after(steps, step, anchor):
    out = _without(steps, step)
    out.insert(out.index(anchor) + 1, step)
    return out


def test_p0_read_without_its_hand_over_is_found():
    """Early max with warpgroup 1's R0 wait dropped: P0·V would read P0 before warpgroup 0 wrote it."""
    wg0, wg1 = hm.warpgroup0(4, True), hm.warpgroup1(4, True)
    problems = hm.check(4, True, (wg0, _without(wg1, ("wait", "r0", 1))))
    assert any("reads p0 of pair 1" in p for p in problems), problems


def test_p0_overwritten_before_it_is_read_is_found():
    """Warpgroup 0 writing the next P0 without waiting for warpgroup 1's read of the last one."""
    wg0, wg1 = hm.warpgroup0(4, False), hm.warpgroup1(4, False)
    wg0 = _without(_without(wg0, ("wait", "p0free", 0)), ("wait", "load0", 0))
    problems = hm.check(4, False, (wg0, wg1))
    assert any("reads p0 of pair 0 and finds pair 1's" in p for p in problems), problems


def test_statistics_read_after_the_hand_back_are_found():
    """Early max with warpgroup 1 reading m0 only after it handed R1 over: warpgroup 0's next early write can come
    first."""
    wg0, wg1 = hm.warpgroup0(4, True), hm.warpgroup1(4, True)
    wg1 = _moved_after(wg1, ("read", "m0", 0), ("arrive", "load0"))
    wg0 = _without(wg0, ("wait", "load0", 0))  # the refill's guard, which would otherwise also order the write
    problems = hm.check(4, True, (wg0, wg1))
    assert any("reads m0 of pair 0 and finds pair 1's" in p for p in problems), problems


def test_a_wait_for_a_phase_that_never_comes_is_a_deadlock():
    wg0, wg1 = hm.warpgroup0(3, True), hm.warpgroup1(3, True)
    problems = hm.check(3, True, (_without(wg0, ("arrive", "m0")), wg1))
    assert any(p.startswith("deadlock") for p in problems), problems


def test_a_wait_passing_on_the_wrong_phase_is_found():
    """A waiter a phase early passes on parity alone: warpgroup 1 waiting for R0's phase 1 at pair 0."""
    wg0, wg1 = hm.warpgroup0(4, False), hm.warpgroup1(4, False)
    wg1 = [("wait", "r0", 1) if s == ("wait", "r0", 0) else s for s in wg1]
    problems = hm.check(4, False, (wg0, wg1))
    assert any("passes its wait on r0 phase 1 with 0 phases completed" in p for p in problems), problems
