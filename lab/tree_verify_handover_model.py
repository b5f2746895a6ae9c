"""Do sm90a's warpgroup hand-overs hold for every interleaving? A model of the two warpgroups' protocol (no GPU).

  python3 -m lab.tree_verify_handover_model [--blocks 1-6]

kernels_cu/tree_verify_sm90a.cu runs a split's key blocks in pairs, warpgroup 0 on the even block and warpgroup 1 on
the odd one, and hands statistics and P from one to the other through mbarriers that a waiter tests by phase parity.
A design that reorders the hand-overs (`TV90_EARLY_MAX`: the max before the exponentials) can deadlock, wait on the
wrong phase, or let one warpgroup overwrite a shared slot the other has not read yet, and on a GPU any of these is a
hang or a wrong bit found late and at the price of a device call. This model writes each warpgroup's hand-over steps
per pair as the source does (one warpgroup acts as one unit: its 128 threads run the same steps), explores every
interleaving of the two, and reports:
- deadlock: neither warpgroup can move and one has steps left;
- a wait that passes on the wrong phase: an mbarrier wait tests parity (passes while the completed-phase count k has
  k % 2 != n % 2), so it passes early if the barrier is a phase behind and hangs if it is two ahead;
- a slot read that does not see the value of its own pair (not yet written, or overwritten by the next pair), for
  the statistics (m0/c0 of warpgroup 0, m1/c1 of warpgroup 1) and the two P tiles, a P·V's read of P counted from its
  issue to its wait.
The slabs' refills are modelled only where they guard a P slot (a P tile lives over its buffer's slab 8, refilled
by a TMA copy before the next S of that buffer). It is a model of the source as read, not of the machine code: it
checks the protocol a design intends, and the race and racecheck check the kernel.
"""

from __future__ import annotations

import argparse
from collections import deque

# Shared slots: the statistics each warpgroup hands over, and the P tile of each buffer.
SLOTS = ("m0", "m1", "p0", "p1")


def pairs(nblk: int):
    """Per pair i of a split of nblk key blocks, as the kernel's loop names them: (i, has1: the odd block j1 = 2i + 1
    exists, next0 / next1: block j0 + 2 / j1 + 2 exists)."""
    for i in range((nblk + 1) // 2):
        yield i, 2 * i + 1 < nblk, 2 * i + 2 < nblk, 2 * i + 3 < nblk


def warpgroup0(nblk: int, early_max: bool) -> list[tuple]:
    """Warpgroup 0's hand-over steps for a split of nblk key blocks (even blocks, columns 0..255)."""
    steps: list[tuple] = []
    for i, has1, next0, next1 in pairs(nblk):
        if i > 0:
            steps.append(("wait", "load0", i - 1))  # S of block j0 reads buffer 0's slabs, slab 8 refilled
        if early_max:
            steps += [("write", "m0", i), ("arrive", "m0")]
        if i > 0:
            steps.append(("wait", "p0free", i - 1))  # warpgroup 1 has read the previous P0
        steps.append(("write", "p0", i))
        if not early_max:
            steps.append(("write", "m0", i))
        steps.append(("arrive", "r0"))
        if has1:
            steps += [("wait", "r1", i), ("read", "m1", i), ("read", "p1", i)]  # P1·V issued (P1 from shared)
            steps.append(("read", "p1", i))  # ... and done (wg_wait<1>)
            if next1:
                steps.append(("arrive", "load1"))  # buffer 1's slabs 0-3 and 8 refilled for block j1 + 2
        if next0:
            steps.append(("arrive", "s0"))
    return steps


def warpgroup1(nblk: int, early_max: bool) -> list[tuple]:
    """Warpgroup 1's hand-over steps (odd blocks, columns 256..511)."""
    steps: list[tuple] = []
    for i, has1, next0, next1 in pairs(nblk):
        p0_issue = [("wait", "r0", i), ("read", "p0", i)]  # P0·V issued with P0 from shared memory
        if early_max:
            steps += [("wait", "m0", i), ("read", "m0", i)]
        else:
            steps += p0_issue[:1] + [("read", "m0", i)] + p0_issue[1:]
        if has1:
            steps += [("write", "p1", i), ("write", "m1", i), ("arrive", "r1")]
        if early_max:
            steps += p0_issue
        steps.append(("read", "p0", i))  # P0·V done (wg_wait<0>)
        if next0:
            steps += [("arrive", "load0"), ("arrive", "p0free")]  # buffer 0's slabs 4-8 refilled, P0 read
        if next1:
            steps += [("wait", "s0", i), ("wait", "load1", i)]  # then the S of block j1 + 2, then its P1
    return steps


def check(nblk: int, early_max: bool, programs=None) -> list[str]:
    """Every interleaving of the two warpgroups' steps; the problems found (empty: the protocol holds)."""
    progs = programs or (warpgroup0(nblk, early_max), warpgroup1(nblk, early_max))
    barriers = sorted({s[1] for p in progs for s in p if s[0] in ("arrive", "wait")})
    bidx = {b: k for k, b in enumerate(barriers)}
    start = (0, 0, (0,) * len(barriers), (-1,) * len(SLOTS))
    seen, todo, problems = {start}, deque([start]), []
    while todo:
        pc0, pc1, done, slots = todo.popleft()
        pcs, moved = (pc0, pc1), False
        for w in (0, 1):
            if pcs[w] == len(progs[w]):
                continue
            step = progs[w][pcs[w]]
            kind, name = step[0], step[1]
            d, sl = list(done), list(slots)
            if kind == "wait":
                k, n = done[bidx[name]], step[2]
                if k % 2 == n % 2:
                    continue  # blocked
                if k != n + 1:
                    problems.append(f"warpgroup {w} passes its wait on {name} phase {n} with {k} phases completed")
            elif kind == "arrive":
                d[bidx[name]] += 1
            elif kind == "write":
                sl[SLOTS.index(name)] = step[2]
            elif kind == "read" and slots[SLOTS.index(name)] != step[2]:
                problems.append(
                    f"warpgroup {w} reads {name} of pair {step[2]} and finds pair {slots[SLOTS.index(name)]}'s"
                )
            moved = True
            nxt = (pc0 + (w == 0), pc1 + (w == 1), tuple(d), tuple(sl))
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
        if not moved and (pc0 < len(progs[0]) or pc1 < len(progs[1])):
            problems.append(f"deadlock: warpgroup 0 at step {pc0} of {len(progs[0])}, 1 at {pc1} of {len(progs[1])}")
    return sorted(set(problems))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", default="1-6", help="split lengths in key blocks, LO-HI")
    a = ap.parse_args(argv)
    lo, _, hi = a.blocks.partition("-")
    bad = 0
    for early in (False, True):
        for nblk in range(int(lo), int(hi or lo) + 1):
            problems = check(nblk, early)
            print(f"{'early max' if early else 'default'}, {nblk} blocks: {'; '.join(problems) or 'holds'}")
            bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
