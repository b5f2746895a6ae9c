"""A sequential Python model of tree_build's select-then-verify path (kernels_cu/tree_build_device/level_select.cuh),
for trying changes to the algorithm on a CPU before spending GPU time: the same levels, thresholds, staircase
caps, trial rounds, capacity and checks, one request at a time, with counters of the work it does.

  python3 -m lab.tree_build_select_model       # per input family: outcome counts, levels, threshold rounds

Outcomes as the kernel's reporting build gives them: 'ok' (the selection is the heap's), 'unverified' (a check or
the chain-stability test failed: the kernel replays), 'overflow' (the candidates outgrew the capacity: replay).
Where the outcome is 'ok' the model's nodes are checked against the reference heap (tuples and score bits).
"""

from __future__ import annotations

import collections
import struct

import numpy as np

from harness import strategies as hh
from reference import tree_build as ref

NEG_INF = float("-inf")
TRIALS = 32  # kThresholds
REFINE_ROUNDS = 4  # kRefineRounds
STAIR_MAX = 256  # TB_STAIR_MAX
MASK = 2**64 - 1


def order_key(s: float) -> int:
    """tree_build.cu's order_key: unsigned, score-ordered, -0.0 and +0.0 equal."""
    u = struct.unpack("<Q", struct.pack("<d", 0.0 if s == 0.0 else s))[0]
    return (~u & MASK) if u >> 63 else (u | (1 << 63))


def key_score(k: int) -> float:
    u = (k & ~(1 << 63)) if k >> 63 else (~k & MASK)
    return struct.unpack("<d", struct.pack("<Q", u))[0]


def trial_score(hi: float, lo: float, k: int) -> float:
    return lo if k == TRIALS - 1 else hi - (hi - lo) * (k / (TRIALS - 1))


def select(lp: np.ndarray, B: int, cap: int, stats: collections.Counter):
    """One request [L, K_in]: (outcome, [(rank tuple, score)] of S in pop order)."""
    L, K_in = lp.shape
    K = min(B, K_in)
    row = lp.astype(np.float64)

    def chain(sp, d):
        l0 = float(row[d, 0])
        s0 = l0 if d == 0 else sp + l0
        return s0, s0 - l0

    def at_or_above(sp, d, cap_r, tau):
        s0, t0 = chain(sp, d)
        if cap_r <= 0 or s0 == NEG_INF or order_key(s0) < tau:
            return 0
        lo, hi = 1, cap_r
        while lo < hi:
            mid = (lo + hi) // 2
            sm = t0 + float(row[d, mid])
            lo, hi = (mid + 1, hi) if sm != NEG_INF and order_key(sm) >= tau else (lo, mid)
        return lo

    def raise_tau(nodes, parents, d, rounds, tau):
        his = [order_key(u["score"]) for u in nodes]
        los = list(his)
        for sp, c in parents:
            s0, t0 = chain(sp, d)
            if c <= 0 or s0 == NEG_INF:
                continue
            worst = s0 if c == 1 else t0 + float(row[d, c - 1])
            his.append(order_key(s0))
            if worst != NEG_INF:
                los.append(order_key(worst))
        hi_k, lo_k = max(his, default=0), min(los, default=MASK)
        for _ in range(rounds):
            stats["trial_rounds"] += 1
            hi, lo = key_score(max(hi_k, tau)), key_score(max(lo_k, tau))
            keys = [order_key(trial_score(hi, lo, k)) for k in range(TRIALS)]
            count = [
                sum(order_key(u["score"]) >= th for u in nodes) + sum(at_or_above(sp, d, c, th) for sp, c in parents)
                for th in keys
            ]
            best = TRIALS - 1
            while best > 0 and count[best - 1] >= B:
                best -= 1
            if count[best] >= B and keys[best] > tau:
                tau = keys[best]
            if best > 0:
                hi_k = keys[best - 1]
            lo_k = tau
        return tau

    U = [dict(score=0.0, tup=(), parent=0, rank=0, depth=0, first=-1)]  # U[0] is the root
    tau, pb, fail = order_key(-1.7976931348623157e308), 0, False
    for d in range(L):
        n, P = len(U), len(U) - pb
        if P == 0:
            break
        caps = []
        for i in range(pb, n):
            ki = order_key(U[i]["score"])
            j = 0
            if P <= STAIR_MAX:
                j = sum(
                    order_key(U[x]["score"]) > ki or (order_key(U[x]["score"]) == ki and x < i) for x in range(pb, n)
                )
            caps.append(min(B // (j + 1) if j < B else 0, K))
        for rnd in range(REFINE_ROUNDS + 1):
            counts = [at_or_above(U[pb + i]["score"], d, caps[i], tau) for i in range(P)]
            if n + sum(counts) <= cap:
                break
            if rnd == REFINE_ROUNDS:
                return "overflow", None
            stats["overflow_refinements"] += 1
            tau = raise_tau(U[1:n], [(U[pb + i]["score"], caps[i]) for i in range(P)], d, 2, tau)
        if sum(counts) == 0:
            break
        stats["levels"] += 1
        for i in range(P):
            p = pb + i
            s0, t0 = chain(U[p]["score"], d)
            for r in range(counts[i]):
                sc = s0
                if r:
                    sc = t0 + float(row[d, r])
                    fail |= sc - float(row[d, r]) != t0
                if r == 0 and d > 0:
                    U[p]["first"] = len(U)
                U.append(dict(score=sc, tup=U[p]["tup"] + (r,), parent=p, rank=r, depth=d + 1, first=-1))
        if d == 0:
            U[0]["first"] = n
        pb = n
        stats["max_candidates"] = max(stats["max_candidates"], len(U))
        if len(U) - 1 > B:
            stats["prunes"] += 1
            tau = raise_tau(U[1:], [], d, 2, tau)
            keep = [True] + [order_key(u["score"]) >= tau for u in U[1:]]
            new = np.cumsum(keep) - 1
            V = []
            for i, u in enumerate(U):
                if keep[i]:
                    u = dict(u)
                    if i:
                        u["parent"] = int(new[u["parent"]]) if keep[u["parent"]] else -1
                    u["first"] = int(new[u["first"]]) if u["first"] >= 0 and keep[u["first"]] else -1
                    V.append(u)
            pb, U = int(sum(keep[:n])), V
    n = len(U)
    ns = min(n - 1, B)
    order = sorted(range(1, n), key=lambda i: (-U[i]["score"], U[i]["tup"]))
    rank = {i: k for k, i in enumerate(order)}
    S = order[:ns]
    fail |= ns == 0 and float(row[0, 0]) != NEG_INF

    def after_last(score, tup):
        last = U[S[-1]]
        return (-last["score"], last["tup"]) < (-score, tup)

    for i in S:  # the checks (a), (b), (c)
        u = U[i]
        p, r, d, sc = u["parent"], u["rank"], u["depth"], u["score"]
        ok = p >= 0 and (p == 0 or rank.get(p, n) < ns)
        if ok and r > 0:
            q = U[i - 1]
            ok = i > 1 and q["parent"] == p and q["rank"] == r - 1 and rank[i - 1] < ns and not sc > q["score"]
        elif ok and p != 0:
            ok = not sc > U[p]["score"]
        if ok and r + 1 < K:
            ys = (sc - float(row[d - 1, r])) + float(row[d - 1, r + 1])
            nxt = U[i + 1] if i + 1 < n else None
            inside = nxt is not None and nxt["parent"] == p and nxt["rank"] == r + 1 and rank[i + 1] < ns
            if ys != NEG_INF and not inside:
                ok = ns == B and after_last(ys, u["tup"][:-1] + (r + 1,))
        if ok and d < L:
            zs = sc + float(row[d, 0])
            inside = u["first"] >= 0 and rank[u["first"]] < ns
            if zs != NEG_INF and not inside:
                ok = ns == B and after_last(zs, u["tup"] + (0,))
        fail |= not ok
    return ("unverified" if fail else "ok"), [(U[i]["tup"], U[i]["score"]) for i in S]


def check_against_reference(lp, B, nodes):
    parents, _, _, ranks, scores = ref.build_one(lp, np.zeros(lp.shape, np.int32), B)
    tuples = [()]
    for p, r in zip(parents, ranks):
        tuples.append(tuples[p] + (r,))
    assert [t for t, _ in nodes] == tuples[1:], "the model's selection is not the heap's"
    assert np.array([s for _, s in nodes], np.float64).tobytes() == np.array(scores, np.float64).tobytes()


def main():
    from lab import tree_build_dev as dev  # the dev tool's input families

    families = {
        "bench": dev.bench_inputs,
        "peaked": dev.peaked_inputs,
        "coarse": lambda bs, B: (hh.logp_rows(np.random.default_rng(3), (bs, 15, B), "coarse", 0.0),),
        "wide": lambda bs, B: (hh.logp_rows(np.random.default_rng(4), (bs, 6, B), "wide", 0.0),),
    }
    for name, make in families.items():
        for B in (16, 64, 256):
            lp = make(8, B)[0]
            stats: collections.Counter = collections.Counter()
            outcomes = collections.Counter()
            for b in range(lp.shape[0]):
                outcome, nodes = select(lp[b], B, 4 * B + 65, stats)
                outcomes[outcome] += 1
                if outcome == "ok":
                    check_against_reference(lp[b], B, nodes)
            per = {k: round(v / lp.shape[0], 1) for k, v in stats.items() if k != "max_candidates"}
            print(f"{name:7s} B={B:4d}: {dict(outcomes)}; per request {per}; max candidates {stats['max_candidates']}")


if __name__ == "__main__":
    main()
