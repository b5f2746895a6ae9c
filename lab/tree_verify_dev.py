"""tree_verify kernel development checks on a GPU (not part of the test suite):

  python3 -m lab.tree_verify_dev smoke        # small shapes against the float64 oracle, device arrays, and
                                                # long prefixes (default splits) against a float64 torch reference
  python3 -m lab.tree_verify_dev sanitize     # a few tiny launches of every entry (for compute-sanitizer)
  python3 -m lab.tree_verify_dev time [--json F]    # timing table (CUDA events, graph replay, rotated inputs)
  python3 -m lab.tree_verify_dev versus [--json F]  # sm90a beside portable on a few shapes (bf16, page 64)
  python3 -m lab.tree_verify_dev deferred [--json F]  # the deferred path (TV.3.7) beside the host-planned call

--variant sm90a runs smoke, sanitize, time and profile on the sm90a kernel instead of portable (calls it
does not take, fp32 or other page sizes, are served by portable, as through the registry).

lab/tree_verify_dev.sh runs them as stages. Useful FLOPs = 2·H·Σ_q(prefix + visible tree keys)·(576+512);
bytes = the KV rows each request needs once, q and out (partials and re-reads are not useful bytes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time

import numpy as np

from contract import BF16, TREE_VERIFY
from contract.trees import unpack_visibility
from harness import spec as clauses
from harness import strategies as hh
from kernels_cu import geometry, specs, tree_verify_ops
from kernels_cu.arrays import run
from reference import tree_verify as ref
from reference.tree_build import layouts

SPEC = specs.get("tree_verify", "portable")


def verify(*args, split_chunk=None, spec=None):
    """The portable kernel (or a patched copy of its spec) on one call, with an optional forced chunk."""
    return run(tree_verify_ops.prepare(spec or SPEC, *args, split_chunk=split_chunk))


def case_args(case):
    return tuple(case.args[k] for k in TREE_VERIFY.arg_names)


SCALE = 0.130861


def tree(rng, n, shape="random"):
    if shape == "chain":
        return np.arange(-1, n - 1, dtype=np.int32)
    par = (rng.random(n) * np.arange(n)).astype(np.int32)
    par[0] = -1
    return par


def err_ratio(got, want, cid):
    t = clauses.clause(cid).tolerance()
    got = np.asarray(got, np.float64)
    bad = np.abs(got - want) / (t["atol"] + t["rtol"] * np.abs(want))
    return float(np.nanmax(np.where(np.isnan(got), np.inf, bad)))


# ------------------------------------------------------------------------------------------------ smoke
def smoke() -> int:
    fails = 0
    rows = []
    rng = np.random.default_rng(0)
    shapes = [  # (dtype, bs, Q, H, prefixes, page, chunk)
        (np.float32, 1, 1, 1, [5], 16, None),
        (BF16, 1, 1, 1, [5], 16, None),
        (np.float32, 2, 9, 3, [70, 0], 7, None),
        (BF16, 2, 9, 3, [70, 0], 7, None),
        (np.float32, 2, 9, 3, [70, 0], 7, 5),
        (BF16, 2, 9, 3, [70, 0], 7, 5),
        (BF16, 3, 17, 64, [300, 1, 64], 16, None),
        (BF16, 3, 17, 64, [300, 1, 64], 16, 64),
        (np.float32, 1, 40, 128, [100], 64, None),
        (BF16, 1, 40, 128, [100], 64, 33),
        (BF16, 1, 1025, 1, [37], 64, None),
        (np.float32, 1, 300, 2, [0], 100, 96),
        # sm90a's paths: page sizes 8 / 32 / 128, odd and even block counts per split (the two warpgroups' pairs),
        # a last block cut mid-page, forced chunks that are not whole blocks, several row tiles
        (BF16, 2, 9, 3, [200, 130], 8, None),
        (BF16, 2, 9, 3, [200, 130], 8, 70),
        (BF16, 1, 5, 16, [1000], 32, 100),
        (BF16, 1, 5, 16, [1000], 32, None),
        (BF16, 2, 3, 64, [700, 64], 128, None),
        (BF16, 2, 3, 64, [700, 64], 128, 192),
        (BF16, 1, 2, 64, [127], 64, None),
        (BF16, 1, 2, 64, [190], 64, None),
        (BF16, 1, 33, 8, [300], 16, 128),
    ]
    for dtype, bs, Q, H, pre, page, chunk in shapes:
        pars = [tree(rng, Q) for _ in range(bs)]
        case = hh.paged_case(rng, dtype, pars, pre, page, H, q_scale=8.0 if Q < 100 else 1.0)
        q, kv, bt, pre_a, vis, scale = case_args(case)
        t0 = time.perf_counter()
        out, lse = verify(q, kv, bt, pre_a, vis, scale, split_chunk=chunk)
        t_gpu = time.perf_counter() - t0
        o64, l64 = ref.tree_verify_float64(q, kv, bt, pre_a, vis, scale)
        cid = "TV.2.1" if dtype == np.float32 else "TV.2.2"
        eo, el = err_ratio(out, o64, cid), err_ratio(lse, l64, cid)
        again = verify(q, kv, bt, pre_a, vis, scale, split_chunk=chunk)
        det = all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(again, (out, lse)))
        ok = eo <= 1 and el <= 1 and det
        fails += not ok
        name = "bf16" if dtype == BF16 else "fp32"
        rows.append(f"{name} bs={bs} Q={Q} H={H} pre={pre} page={page} chunk={chunk}: out {eo:.3f} lse {el:.3f} "
                    f"(x tol) det={det} {'ok' if ok else 'FAIL'} ({t_gpu * 1e3:.0f} ms)")  # fmt: skip
        print(rows[-1], flush=True)
    fails += device_arrays()
    fails += long_prefix_checks()
    print(f"smoke: {fails} failure(s)")
    return 1 if fails else 0


def device_arrays() -> int:
    """torch bf16 / fp32 and cupy fp32 inputs give the same bits as numpy inputs, in the caller's library."""
    import torch

    fails = 0
    rng = np.random.default_rng(1)
    for dtype in (BF16, np.float32):
        case = hh.paged_case(rng, dtype, [tree(rng, 12), tree(rng, 7)], [90, 3], 16, 8)
        q, kv, bt, pre, vis, scale = case_args(case)
        want = verify(q, kv, bt, pre, vis, scale)

        def tdev(a):
            if a.dtype == BF16:
                return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
            return torch.from_numpy(np.ascontiguousarray(a)).cuda()

        got = verify(tdev(q), tdev(kv), tdev(bt), tdev(pre), vis, scale)  # vis stays on the host
        o = got[0].view(torch.int16).cpu().numpy().view(BF16) if dtype == BF16 else got[0].cpu().numpy()
        same = np.array_equal(o.view(np.uint8), want[0].view(np.uint8)) and np.array_equal(
            got[1].cpu().numpy(), want[1]
        )
        lib_ok = type(got[0]).__module__.startswith("torch")
        print(f"device arrays torch {np.dtype(dtype).name}: same bits {same}, torch out {lib_ok}")
        fails += not (same and lib_ok)
    return fails


def torch_reference(q, kv, bt, pre, vis, scale, b):
    """float64 attention of request b on the GPU (for prefixes too long for the numpy oracle); q, kv torch,
    bt, pre, vis numpy."""
    import torch

    Q, H = q.shape[1], q.shape[2]
    P = int(pre[b])
    page = kv.shape[1]
    pos = torch.arange(P + Q, device="cuda")
    btb = torch.from_numpy(bt[b].astype(np.int64)).cuda()
    rows = kv[btb[pos // page], pos % page].to(torch.float64)  # [N, 576]
    qb = q[b].reshape(Q * H, 576).to(torch.float64)
    s = (qb @ rows.T) * scale
    bits = torch.from_numpy(unpack_visibility(vis[b : b + 1], Q)[0]).cuda()
    mask = torch.ones(Q, P + Q, dtype=torch.bool, device="cuda")
    mask[:, P:] = bits
    mask = mask.repeat_interleave(H, 0)
    s = s.masked_fill(~mask, float("-inf"))
    m = s.max(1, keepdim=True).values
    e = torch.exp(s - m)
    l = e.sum(1, keepdim=True)
    return (e / l) @ rows[:, :512], (m + torch.log(l))[:, 0]


def make_device_case(bs, Q, H, P, page=64, dtype_name="bf16", seed=0):
    import torch

    tdt = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    rng = np.random.default_rng(seed)
    g = torch.Generator(device="cuda").manual_seed(seed)
    pre = np.full(bs, P, np.int32)
    pages = (P + Q + page - 1) // page
    perm = rng.permutation(bs * pages + 1).astype(np.int32)
    bt = perm[: bs * pages].reshape(bs, pages)
    kv = (torch.randn(bs * pages + 1, page, 576, generator=g, device="cuda") * 0.5).to(tdt)
    q = torch.randn(bs, Q, H, 576, generator=g, device="cuda").to(tdt)
    pars = np.stack([tree(rng, Q) for _ in range(bs)])
    deps = np.stack([hh.depths_of(p) for p in pars])
    vis = layouts(pars, deps, np.full(bs, Q, np.int32), pre)[0]
    return q, kv, bt, pre, vis


def long_prefix_checks() -> int:

    fails = 0
    for bs, Q, H, P, chunk in [(1, 16, 64, 32768, None), (2, 1, 64, 32768, None), (1, 5, 128, 20000, 4096)]:
        q, kv, bt, pre, vis = make_device_case(bs, Q, H, P, seed=bs + Q)
        out, lse = verify(q, kv, bt, pre, vis, SCALE, split_chunk=chunk)
        worst = 0.0
        for b in range(bs):
            o, l = torch_reference(q, kv, bt, pre, vis, SCALE, b)
            eo = err_ratio(out[b].reshape(Q * H, 512).float().cpu().numpy(), o.cpu().numpy(), "TV.2.2")
            el = err_ratio(lse[b].reshape(Q * H).cpu().numpy(), l.cpu().numpy(), "TV.2.2")
            worst = max(worst, eo, el)
        n = geometry.tree_verify(P + Q, Q * H, 0, chunk or 0, budget=tree_verify_ops.budget(SPEC))["n_splits"]
        print(f"long prefix bf16 bs={bs} Q={Q} H={H} P={P} splits={n}: worst {worst:.3f} x tol "
              f"{'ok' if worst <= 1 else 'FAIL'}")  # fmt: skip
        fails += worst > 1
    return fails


# ------------------------------------------------------------------------------------------------ sanitize
def sanitize() -> int:
    rng = np.random.default_rng(2)
    for dtype, page in ((BF16, 7), (np.float32, 7), (BF16, 16)):  # bf16 page 16: the sm90a kernel's path
        for chunk in (None, 5):
            case = hh.paged_case(rng, dtype, [tree(rng, 9), tree(rng, 4)], [70, 0], page, 3)
            q, kv, bt, pre, vis, scale = case_args(case)
            out, lse = verify(q, kv, bt, pre, vis, scale, split_chunk=chunk)
            assert np.isfinite(out.astype(np.float32)).all() and np.isfinite(lse).all()
    case = hh.paged_case(rng, BF16, [tree(rng, 70)], [40], 16, 2)
    q, kv, bt, pre, vis, scale = case_args(case)
    verify(q, kv, bt, pre, vis, scale, split_chunk=64)
    print("sanitize: ran bf16/fp32 x split/no split, and a 3-word visibility tree")
    return 0


# ------------------------------------------------------------------------------------------------ time
CONFIGS = [  # (bs, Q, H, prefix, dtype, chunk)
    (1, 1, 64, 32768, "bf16", None),
    (1, 1, 64, 32768, "bf16", 256),
    (1, 1, 64, 32768, "bf16", 1024),
    (8, 1, 64, 32768, "bf16", None),
    (8, 1, 64, 32768, "bf16", 256),
    (1, 1, 128, 32768, "bf16", None),
    (32, 1, 128, 8192, "bf16", None),
    (32, 1, 128, 8192, "bf16", 256),
    (1, 16, 64, 8192, "bf16", None),
    (1, 16, 64, 32768, "bf16", None),
    (1, 16, 64, 32768, "bf16", 32800),
    (1, 64, 64, 32768, "bf16", None),
    (1, 16, 128, 32768, "bf16", None),
    (8, 16, 64, 8192, "bf16", None),
    (8, 16, 64, 8192, "bf16", 8224),
    (32, 16, 64, 8192, "bf16", None),
    (32, 16, 64, 8192, "bf16", 8224),
    (8, 64, 128, 8192, "bf16", None),
    (32, 64, 64, 8192, "bf16", None),
    (1, 16, 64, 8192, "fp32", None),
]


def ceilings():
    import torch

    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for _ in range(5):
        e0.record()
        b.copy_(a)
        e1.record()
        e1.synchronize()
        t.append(e0.elapsed_time(e1))
    copy = 2 * n / (statistics.median(t) * 1e-3) / 1e9
    del a, b
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        x @ y
    t = []
    for _ in range(5):
        e0.record()
        x @ y
        e1.record()
        e1.synchronize()
        t.append(e0.elapsed_time(e1))
    mm = 2 * 8192**3 / (statistics.median(t) * 1e-3) / 1e12
    return copy, mm


VERSUS_CONFIGS = [  # (bs, Q, H, prefix, dtype, chunk): the shapes issue 25 quotes, latency to compute-bound
    (1, 2, 64, 8192, "bf16", None),
    (1, 1, 16, 32768, "bf16", None),
    (128, 1, 16, 8192, "bf16", None),
    (128, 1, 128, 8192, "bf16", None),
    (32, 2, 128, 8192, "bf16", None),
    (32, 4, 128, 8192, "bf16", None),
    (8, 64, 128, 8192, "bf16", None),
    (1, 64, 64, 32768, "bf16", None),
    (32, 16, 64, 8192, "bf16", None),
]
# sm90a alone with forced split chunks: where the default split rule should sit
CHUNK_CONFIGS = [
    (1, 2, 64, 8192, "bf16", 256),
    (1, 2, 64, 8192, "bf16", 128),
    (1, 1, 16, 32768, "bf16", 256),
    (128, 1, 128, 8192, "bf16", 1024),
    (128, 1, 128, 8192, "bf16", 2048),
    (128, 1, 128, 8192, "bf16", 8256),
    (128, 1, 16, 8192, "bf16", 2048),
    (32, 2, 128, 8192, "bf16", 2048),
]


def write_json(json_path, copy, mm, **tables) -> None:
    """The timings beside the ceilings measured in the same run, when a --json file was asked for."""
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"copy_gbs": copy, "bf16_mm_tflops": mm, **tables}, f, indent=1)


def versus(json_path=None) -> int:
    """sm90a and portable on the same shapes, one table with the speedup."""
    copy, mm = ceilings()
    print(f"ceilings: copy {copy:.0f} GB/s (read+write), bf16 matmul 8192^3 {mm:.0f} TFLOP/s", flush=True)
    rows = []
    for c in VERSUS_CONFIGS:
        pair = {v: time_one(*c, copy=copy, mm=mm, spec=specs.get("tree_verify", v)) for v in ("portable", "sm90a")}
        rows.append(pair)
    print("\n| bs | Q | H | prefix | portable µs | sm90a µs | speedup | sm90a TFLOP/s | sm90a GB/s (% copy) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pr in rows:
        a, b = pr["portable"], pr["sm90a"]
        print(f"| {a['bs']} | {a['Q']} | {a['H']} | {a['prefix']} | {a['us']:.1f} | {b['us']:.1f} | "
              f"{a['us'] / b['us']:.2f} | {b['tflops']:.0f} | {b['gbs']:.0f} ({b['pct_copy']:.0f} %) |")  # fmt: skip
    chunked = [time_one(*c, copy=copy, mm=mm, spec=specs.get("tree_verify", "sm90a")) for c in CHUNK_CONFIGS]
    print("\n| bs | Q | H | prefix | chunk x splits | CTAs | sm90a µs | TFLOP/s | GB/s (% copy) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b in chunked:
        print(f"| {b['bs']} | {b['Q']} | {b['H']} | {b['prefix']} | {b['chunk']} x {b['splits']} | {b['ctas']} | "
              f"{b['us']:.1f} | {b['tflops']:.0f} | {b['gbs']:.0f} ({b['pct_copy']:.0f} %) |")  # fmt: skip
    write_json(json_path, copy, mm, versus=rows, chunks=chunked)
    return 0


def time_configs(json_path=None) -> int:
    copy, mm = ceilings()
    print(f"ceilings: copy {copy:.0f} GB/s (read+write), bf16 matmul 8192^3 {mm:.0f} TFLOP/s", flush=True)
    results = [time_one(*c, copy=copy, mm=mm) for c in CONFIGS]
    table(results, copy, mm)
    knockouts = time_patched(SPEC, VARIANTS, VARIANT_CONFIGS, copy, mm)  # where the time goes (timing only)
    print("\n| variant | bs | Q | H | prefix | µs | useful TFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for r in knockouts:
        cells = (r["variant"], r["bs"], r["Q"], r["H"], r["prefix"], f"{r['us']:.1f}", f"{r['tflops']:.0f}")
        print("| " + " | ".join(str(c) for c in cells) + " |")
    write_json(json_path, copy, mm, results=results, variants=knockouts)
    return 0


# Source patches of kernels_cu/tree_verify.cu for timing experiments: a knock-out removes one stage (wrong
# results, same launch shape), so base minus knock-out is that stage's share of the time.
VARIANTS = {
    "base": [],
    "no_scores": [("Math::scores(sQ, sK, sS, warp, lane);", "")],
    "no_softmax": [("{  // softmax step", "if (false) {  // softmax step")],
    "no_pv": [("Math::pv(acc, sAlpha, sP, sK, warp, lane);", "")],
    "no_kv_loads": [("if (STAGES == 2 && j + 1 < nblk) load_kv(j + 1, (j + 1) & 1);", "")],
    "fast_exp": [("const float alpha = expf(m_run - m_use);", "const float alpha = __expf(m_run - m_use);"),
                 ("x[e] = expf(x[e] - m_use);", "x[e] = __expf(x[e] - m_use);")],
}  # fmt: skip
# The same for kernels_cu/tree_verify_sm90a.cu (timing only: a knock-out computes garbage).
VARIANTS_SM90A = {
    "base": [],
    "no_s_products": [
        ("wgmma_ss_kk(s, desc_k(sQ, C, ks), desc_k(buf(j), C, ks), !(first && ks == 0));", "(void)first;"),
    ],
    "no_pv_products": [
        ("wgmma_rs_mn256(o, pb[kk], desc_v256(vbuf, wg * 4, kk));", ";"),
        ("wgmma_ss_kmn256(o, desc_k(sP, 0, kk), desc_v256(vbuf, wg * 4, kk));", ";"),
    ],
    "no_exp_no_mask": [
        ("ex2(fmaf(acc[i], scale_log2, -m_use[h]))", "fmaf(acc[i], scale_log2, -m_use[h])"),
        ("ex2(fmaf(acc[i + 1], scale_log2, -m_use[h]))", "fmaf(acc[i + 1], scale_log2, -m_use[h])"),
        ("  r.all = k0 >= x.kbeg && k0 + kBN <= x.kend && k0 + kBN <= x.P;", "  r.all = true;"),
    ],
    "no_o_rescale": [("  if (!__any_sync(0xffffffffu, c[0] != 1.f || c[1] != 1.f)) return;", "  return;")],
}  # fmt: skip
KNOCKOUT_CONFIGS_SM90A = [(8, 64, 128, 8192, "bf16", None), (128, 1, 128, 8192, "bf16", 8256),
                          (128, 1, 16, 8192, "bf16", None), (1, 2, 64, 8192, "bf16", None)]  # fmt: skip


def time_patched(spec, variants, configs, copy, mm) -> list[dict]:
    """Every config timed with every variant's source patches applied to spec (rows carry the variant's name)."""
    rows = []
    for name, patches in variants.items():
        patched = dataclasses.replace(spec, patches=tuple(patches))
        for c in configs:
            rows.append({**time_one(*c, copy=copy, mm=mm, spec=patched), "variant": name})
    return rows


def knockouts(json_path=None) -> int:
    """sm90a with one stage removed at a time (lab/PERF_NOTES.md: base minus knock-out = that stage)."""
    copy, mm = ceilings()
    rows = time_patched(specs.get("tree_verify", "sm90a"), VARIANTS_SM90A, KNOCKOUT_CONFIGS_SM90A, copy, mm)
    print("\n| sm90a variant | bs | Q | H | prefix | chunk x splits | µs | useful TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['bs']} | {r['Q']} | {r['H']} | {r['prefix']} | {r['chunk']} x {r['splits']} | "
              f"{r['us']:.1f} | {r['tflops']:.0f} |")  # fmt: skip
    write_json(json_path, copy, mm, knockouts=rows)
    return 0


VARIANT_CONFIGS = [(1, 16, 64, 32768, "bf16", None), (1, 1, 64, 32768, "bf16", None), (8, 16, 64, 8192, "bf16", None)]


def time_one(bs, Q, H, P, dt, chunk, *, copy, mm, spec=None):
    import torch

    from harness import timing

    if True:  # (kept indented: one config's timing)
        spec = spec or SPEC
        served = tree_verify_ops.served_by(spec, dt, 64).variant
        var = geometry.tree_verify_variant("sm90a" if served == "sm90a" else dt)
        g = geometry.tree_verify(P + Q, Q * H, var, chunk or 0, budget=tree_verify_ops.budget(spec))
        kv_bytes = bs * (P + Q) * 576 * (2 if dt == "bf16" else 4)
        rot = max(1, min(4, math.ceil(200e6 / kv_bytes)))  # rotate inputs past the 60 MB L2
        preps, flop = [], 0.0
        for r in range(rot):
            q, kv, bt, pre, vis = make_device_case(bs, Q, H, P, dtype_name=dt, seed=100 + r)
            if r == 0:
                seen = int(unpack_visibility(vis, Q).sum())
                flop = 2.0 * H * (bs * Q * P + seen) * (576 + 512)
                nbytes = kv_bytes + q.numel() * q.element_size() * (1 + 512 / 576)  # KV once, q in, out
            preps.append(tree_verify_ops.prepare(spec, q, kv, bt, pre, vis, SCALE, split_chunk=chunk))

        try:  # the perf suite's timing helper: the rotation's input sets cycled past the L2, graph replays
            plan = timing.l2_plan(int(kv_bytes), timing.l2_bytes())
            policy = timing.policy_from_env(warmup=rot, min_reps=7, max_reps=50)
            times, _ = timing.device_times_us([p.launch for p in preps], plan=plan, policy=policy)
        finally:
            for p in preps:
                p.finish()
            torch.cuda.empty_cache()
        t = statistics.median(times)
        res = {
            "variant": spec.variant, "bs": bs, "Q": Q, "H": H, "prefix": P, "dtype": dt, "chunk": g["split_chunk"],
            "splits": g["n_splits"],
            "ctas": g["row_tiles"] * g["n_splits"] * bs, "us": t, "tflops": flop / t / 1e6, "gbs": nbytes / t / 1e3,
            "spread": (max(times) - min(times)) / t,
        }  # fmt: skip
        res["pct_copy"] = 100 * res["gbs"] / copy
        res["pct_mm"] = 100 * res["tflops"] / mm
        print(json.dumps(res), flush=True)
        return res


DEFERRED_CONFIGS = [(bs, Q, H, 8192) for H in (64, 128) for Q in (16, 64) for bs in (1, 8, 64)]


def deferred(json_path=None, max_context=32768) -> int:
    """The deferred path (TV.3.7: the checks and the split plan on the device, the grid sized for max_context) beside
    the host-planned call on the same inputs, bf16, page 64, graph replays of each alone (issue #33's aim: <= 3 %
    slower). Inputs are torch tensors (visibility as a uint32 view)."""
    import torch

    from harness import timing

    rows = []
    for bs, Q, H, P in DEFERRED_CONFIGS:
        q, kv, bt, pre, vis = make_device_case(bs, Q, H, P)
        dev = {"block_table": torch.from_numpy(bt).cuda(), "prefix_lens": torch.from_numpy(pre).cuda(),
               "visibility": torch.from_numpy(vis.view(np.int32)).cuda().view(torch.uint32)}  # fmt: skip
        host = tree_verify_ops.prepare(SPEC, q, kv, bt, pre, vis, SCALE)
        dfr = tree_verify_ops.prepare_deferred(SPEC, q, kv, **dev, softmax_scale=SCALE, max_context=max_context)
        try:
            kv_bytes = bs * (P + Q) * 576 * 2
            plan = timing.l2_plan(int(kv_bytes), timing.l2_bytes())
            policy = timing.policy_from_env(warmup=2, min_reps=7, max_reps=50)
            t = {}
            for name, p in (("host", host), ("deferred", dfr), ("host_again", host)):
                times, _ = timing.device_times_us([p.launch], plan=plan, policy=policy)
                t[name] = statistics.median(times)
            same = all(torch.equal(a, b) for a, b in zip(host.results(), dfr.results()))
        finally:
            host.finish()
            dfr.staging.close()
            torch.cuda.empty_cache()
        base = min(t["host"], t["host_again"])
        row = {"variant": SPEC.variant, "bs": bs, "Q": Q, "H": H, "prefix": P, "max_context": max_context,
               "host_us": round(base, 2), "host_spread": round(abs(t["host"] - t["host_again"]) / base, 4),
               "deferred_us": round(t["deferred"], 2), "ratio": round(t["deferred"] / base, 4),
               "bit_identical": same}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| variant | bs | Q | H | prefix | host-planned µs | deferred µs | deferred / host | bits |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['variant']} | {r['bs']} | {r['Q']} | {r['H']} | {r['prefix']} | {r['host_us']:.1f} | "
            f"{r['deferred_us']:.1f} | {r['ratio']:.3f} | {'same' if r['bit_identical'] else 'DIFFER'} |"
        )
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"max_context": max_context, "rows": rows}, f, indent=1)
    return 0 if all(r["bit_identical"] for r in rows) else 1


def table(results, copy, mm):
    print(f"\n| bs | Q | H | prefix | dtype | chunk x splits | CTAs | µs | useful TFLOP/s | GB/s | % copy ({copy:.0f}) "
          f"| % bf16 mm ({mm:.0f}) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['bs']} | {r['Q']} | {r['H']} | {r['prefix']} | {r['dtype']} | {r['chunk']} x {r['splits']} | "
              f"{r['ctas']} | {r['us']:.1f} | {r['tflops']:.0f} | {r['gbs']:.0f} | {r['pct_copy']:.0f} | "
              f"{r['pct_mm']:.0f} |")  # fmt: skip


def profile_one(shape="1,16,64,8192") -> int:
    """Two warm-up launches and one more of a compute-bound shape (bs,Q,H,prefix), for ncu --launch-skip 2
    --launch-count 1."""
    q, kv, bt, pre, vis = make_device_case(*(int(v) for v in shape.split(",")))
    p = tree_verify_ops.prepare(SPEC, q, kv, bt, pre, vis, SCALE)
    for _ in range(3):
        p.launch()
    p.finish()
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["smoke", "sanitize", "time", "versus", "profile", "knockouts", "deferred"])
    ap.add_argument("--json")
    ap.add_argument("--shape", default="1,16,64,8192", help="profile: bs,Q,H,prefix")
    ap.add_argument("--variant", default="portable", choices=[s.variant for s in specs.for_op("tree_verify")])
    a = ap.parse_args()
    global SPEC
    SPEC = specs.get("tree_verify", a.variant)
    modes = {"smoke": smoke, "sanitize": sanitize, "time": lambda: time_configs(a.json),
             "profile": lambda: profile_one(a.shape), "versus": lambda: versus(a.json),
             "knockouts": lambda: knockouts(a.json), "deferred": lambda: deferred(a.json)}  # fmt: skip
    sys.exit(modes[a.mode]())


if __name__ == "__main__":
    main()
