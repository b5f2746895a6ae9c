"""The public MLA kernels as tree_verify comparators (issue 25): FlashMLA and FlashInfer MLA (fa3; fa2) on
chain-shaped trees (their `causal` is our chain), and the cascades (a peer over the prefix + a torch tree pass
+ a merge by lse) on tree shapes. Each is the adapter of adapters/ (one wrapper per peer, shared with the
conformance suite), planned once per shape (plan / scheduler metadata outside the timing, as a serving engine
does per batch), and checked against the float64 oracle at the shape it is timed on (`check`): a comparator
that computes something else is recorded as wrong, not timed.
"""

from __future__ import annotations

import importlib.metadata

import numpy as np

from harness import spec
from reference import tree_build

from . import Unavailable

CHAIN = {"flashmla": "flashmla", "flashinfer_mla": "fa3", "flashinfer_mla_fa2": "fa2"}  # on chain-shaped trees
CASCADES = {"flashmla_cascade": "flashmla", "flashinfer_mla_cascade": "flashinfer_fa3"}  # on any tree
NAMES = (*CHAIN, *CASCADES)
PACKAGES = ("sgl-flash-mla", "flashinfer-python", "apache-tvm-ffi")


def versions() -> dict:
    """The peers' package versions (None where not installed), for the benchmark JSON's machine info."""
    out = {}
    for p in PACKAGES:
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            out[p] = None
    return out


def _why_not(name: str) -> str | None:
    from adapters import flashinfer_mla, flashmla

    peer = CHAIN.get(name) or CASCADES[name]
    if peer == "flashmla":
        return flashmla.available()
    return flashinfer_mla.available(peer.removeprefix("flashinfer_"))


def prepare(name: str, case):
    """A call of comparator `name` on `case` (harness.bench.verify_baselines.Case: torch q and cache), planned
    once: returns fn() -> (out [bs, Q, H, 512] bf16, lse [bs, Q, H] natural log). Unavailable naming why not
    (a package missing, a GPU it does not run on, a shape outside what the peer takes)."""
    import torch

    from adapters import cascade, flashinfer_mla, flashmla

    why = _why_not(name)
    if why:
        raise Unavailable(f"{name}: {why}")
    _bs, Q, H, _P = case.shape
    dev = case.q.device
    page = case.kv.shape[1]
    if name in CHAIN:
        if not is_chain(case):
            raise Unavailable(f"{name}: takes chain-shaped trees only")
        if name == "flashmla":
            if page != flashmla.PAGE:
                raise Unavailable(f"{name}: takes pages of {flashmla.PAGE} rows, not {page}")
            bt = torch.from_numpy(case.block_table).to(dev)
            plan = flashmla.plan_chain(bt, torch.from_numpy(case.prefix_lens).to(dev), Q, case.scale)
        else:
            plan = flashinfer_mla.Plan(case.block_table, case.prefix_lens + Q, Q=Q, H=H, page_size=page, causal=True,
                                       softmax_scale=case.scale, device=dev, backend=CHAIN[name])  # fmt: skip
    else:
        plan = cascade.Cascade(CASCADES[name], case.block_table, case.prefix_lens, case.visibility, Q=Q, H=H,
                               page_size=page, softmax_scale=case.scale, device=dev)  # fmt: skip
    return lambda: plan.run(case.q, case.kv)


def is_chain(case) -> bool:
    Q = case.q.shape[1]
    return bool((tree_build.unpack_visibility(case.visibility, Q) == np.tril(np.ones((Q, Q), bool))[None]).all())


def check(case, out, lse, *, requests=None, queries: int = 2) -> dict:
    """out and lse against the float64 oracle (on the device) for the first and last request, their first and
    last queries: {"ok", "max_cos_diff", "max_lse_err", "max_out_err", "rows"} (the errors are |got − oracle|
    − rtol·|oracle| at worst, to compare with the clause's atol); ok = finite, within TV.2.7's cosine, TV.2.9's
    lse and TV.2.2's out tolerance (the clauses' own numbers)."""
    import torch

    bs, Q, _H, _P = case.shape
    reqs = sorted(set(requests if requests is not None else (0, bs - 1)))
    qs = sorted({*range(min(queries, Q)), Q - 1})
    cos_tol = spec.clause("TV.2.7").tolerance()["max_cos_diff"]
    lse_tol, out_tol = spec.clause("TV.2.9").tolerance(), spec.clause("TV.2.2").tolerance()
    worst = {"max_cos_diff": 0.0, "max_lse_err": 0.0, "max_out_err": 0.0}
    ok = True
    page = case.kv.shape[1]
    for b in reqs:
        P = int(case.prefix_lens[b])
        pos = np.arange(P + Q)
        rows = torch.from_numpy(case.block_table[b, pos // page].astype(np.int64) * page + pos % page)
        k = case.kv.view(-1, case.kv.shape[-1])[rows.to(case.kv.device)].double()  # [P + Q, 576]
        bits = tree_build.unpack_visibility(case.visibility[b : b + 1], Q)[0][qs]  # [n, Q]
        seen = torch.ones(len(qs), P + Q, dtype=torch.bool, device=k.device)
        seen[:, P:] = torch.from_numpy(np.ascontiguousarray(bits)).to(k.device)
        s = torch.einsum("nhd,kd->nhk", case.q[b, qs].double(), k) * float(np.float32(case.scale))
        s = s.masked_fill(~seen[:, None, :], float("-inf"))
        l64 = torch.logsumexp(s, -1)
        o64 = torch.einsum("nhk,kd->nhd", torch.exp(s - l64[..., None]), k[:, :512])
        o, l = out[b, qs].double(), lse[b, qs].double()
        cos = 1 - 2 * (o * o64).sum() / ((o * o).sum() + (o64 * o64).sum())
        lerr = ((l - l64).abs() - lse_tol["rtol"] * l64.abs()).max()
        oerr = ((o - o64).abs() - out_tol["rtol"] * o64.abs()).max()
        worst["max_cos_diff"] = max(worst["max_cos_diff"], float(cos))
        worst["max_lse_err"] = max(worst["max_lse_err"], float(lerr))
        worst["max_out_err"] = max(worst["max_out_err"], float(oerr))
        finite = bool(torch.isfinite(o).all() and torch.isfinite(l).all())
        ok &= finite and float(cos) <= cos_tol and float(lerr) <= lse_tol["atol"] and float(oerr) <= out_tol["atol"]
    return {"ok": bool(ok), **worst, "rows": f"requests {reqs}, queries {qs}, float64 oracle on the device",
            "clauses": "TV.2.7 cosine, TV.2.9 lse, TV.2.2 out"}  # fmt: skip


def time_checked(name: str, case, *, flush_bytes: int, policy) -> tuple[list[float], dict]:
    """Comparator `name` on `case`, checked against the float64 oracle (check) and then timed as the perf suite
    times the peers (torch events, a flush of flush_bytes before each call, the host launch hidden): (samples in
    µs, the check). Unavailable naming why it cannot run; WrongResult when it computes something else."""
    from harness import timing

    fn = prepare(name, case)
    out, lse = fn()
    chk = check(case, out, lse)
    del out, lse
    if not chk["ok"]:
        raise WrongResult(f"wrong result against the float64 oracle: {chk}", chk)
    return timing.torch_times_us(fn, flush_bytes=flush_bytes, policy=policy, hide_launch=True), chk


class WrongResult(Exception):
    """A comparator whose output is off the float64 oracle at the timed shape (args: message, the check)."""
