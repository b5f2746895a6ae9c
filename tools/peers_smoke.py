"""One GPU command that shows whether the public MLA peers work here through the project's adapters:

    PYTHONPATH=.peers/site FLASHINFER_DISABLE_JIT=1 TVM_FFI_DISABLE_TORCH_C_DLPACK=1 \\
        python -m tools.peers_smoke OUT [--conformance]

(.peers/site from tools/peers_setup.sh, or the peers installed with `pip install '.[peers]'`). Every step is
guarded: an error is printed and recorded, and the next step runs. Steps:
1. environment: torch, GPU, the peers' versions and where they import from;
2. each adapter (FlashMLA, FlashInfer MLA fa3 and fa2, both cascades) on a few shapes against the float64
   oracle with the clauses' tolerances (chains for the peers: H, Q, prefix, batch and page sizes; trees for
   the cascades), plus a rerun (determinism) and one request alone (batch invariance), for the record;
3. the perf comparators on three shapes: each peer checked against the oracle and timed with the suite's
   timing helper, beside the project's kernel (cuda:portable, and cuda:sm90a where it runs);
4. the ceilings: the copy kernel, the read kernel, cuMemcpyDtoD, the bf16 matmul;
5. with --conformance: the tree_verify conformance suite against every adapter (reports under OUT/conformance).
Writes OUT/smoke.json and OUT/summary.txt and prints the summary table last.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
import traceback

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent

ADAPTERS = {
    "flashmla": "adapters.flashmla:IMPLEMENTATION",
    "flashinfer-mla-fa3": "adapters.flashinfer_mla:IMPLEMENTATION",
    "flashinfer-mla-fa2": "adapters.flashinfer_mla:FA2",
    "flashmla-cascade": "adapters.cascade:FLASHMLA_CASCADE",
    "flashinfer-mla-cascade": "adapters.cascade:FLASHINFER_CASCADE",
}
# (H, trees or chain length, prefixes, page size): chains for the peers, trees for the cascades
CHAIN_CASES = [(16, 1, [0], 64), (64, 4, [70, 1000], 64), (128, 2, [8192], 64), (1, 17, [5, 64, 300], 64),
               (8, 4, [100], 16), (8, 4, [100], 1)]  # fmt: skip
TREE_CASES = [(64, [-1, 0, 0, 1, 1, 2, 2, 3], [70, 1000], 64), (16, [-1, 0, 0, 0], [0, 129], 64)]
PERF_SHAPES = [(64, 2, 8192, 1), (128, 4, 8192, 32), (16, 1, 32768, 128)]
TREE_PERF = (64, 17, 8192, 8)

LOG: list[dict] = []


def step(name):
    """Run a step: its result or error recorded, never raised."""

    def wrap(fn):
        def run(*a, **kw):
            t = time.time()
            try:
                out = fn(*a, **kw)
                LOG.append({"step": name, "ok": True, "s": round(time.time() - t, 1), "result": out})
                return out
            except Exception as e:
                tb = traceback.format_exc(limit=6)
                print(f"[{name}] FAILED: {type(e).__name__}: {e}\n{tb}", flush=True)
                LOG.append(
                    {"step": name, "ok": False, "s": round(time.time() - t, 1), "error": f"{type(e).__name__}: {e}"}
                )
                return None

        return run

    return wrap


@step("environment")
def environment():
    import torch

    from harness.bench import peers

    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
           "capability": torch.cuda.get_device_capability(), "peers": peers.versions()}  # fmt: skip
    for mod in ("flash_mla", "flashinfer", "tvm_ffi"):
        try:
            m = __import__(mod)
            out[f"{mod}_from"] = str(pathlib.Path(m.__file__).parent)
        except Exception as e:
            out[f"{mod}_from"] = f"does not import: {type(e).__name__}: {str(e)[:200]}"
    print("environment:", json.dumps(out, default=str), flush=True)
    return out


def _case(H, tree, prefixes, page, seed=0):
    import ml_dtypes

    from harness import strategies as hh

    pars = [np.arange(-1, tree - 1, dtype=np.int32) if isinstance(tree, int) else np.asarray(tree, np.int32)]
    return hh.paged_case(np.random.default_rng(seed), ml_dtypes.bfloat16, pars * len(prefixes), prefixes, page, H)


def _compare(case, got) -> dict:
    """Worst errors against the float64 oracle, in the clauses' terms (TV.2.2 out, TV.2.9 lse, TV.2.7 cos)."""
    from harness import spec
    from reference import tree_verify as ref

    o64, l64 = ref.tree_verify_float64(**case.args)
    o, l = got.out.astype(np.float64), got.lse.astype(np.float64)
    t_out, t_lse = spec.clause("TV.2.2").tolerance(), spec.clause("TV.2.9").tolerance()
    out_excess = float((np.abs(o - o64) - t_out["rtol"] * np.abs(o64)).max())
    lse_excess = float((np.abs(l - l64) - t_lse["rtol"] * np.abs(l64)).max())
    cos = max(float(1 - 2 * (o[b] * o64[b]).sum() / ((o[b] ** 2).sum() + (o64[b] ** 2).sum())) for b in range(len(o)))
    ok = out_excess <= t_out["atol"] and lse_excess <= t_lse["atol"] and cos <= spec.clause("TV.2.7").tolerance()[
        "max_cos_diff"] and np.isfinite(o).all() and np.isfinite(l).all()  # fmt: skip
    return {"ok": bool(ok), "out_excess": out_excess, "lse_excess": lse_excess, "cos_diff": cos,
            "lse_max_abs_err": float(np.abs(l - l64).max())}  # fmt: skip


def adapter_cases(label, target):
    from harness import impls

    impl = impls.get(target)
    rows = []
    if impl.why_not:
        print(f"{label}: not available: {impl.why_not}", flush=True)
        return {"available": False, "why": impl.why_not, "cases": rows}
    fn = impl.op("tree_verify")
    cases = TREE_CASES if "cascade" in label else CHAIN_CASES
    for H, tree, prefixes, page in cases:
        desc = f"H{H} {'Q' + str(tree) + ' chain' if isinstance(tree, int) else 'tree of ' + str(len(tree))} " \
               f"prefix {prefixes} page {page}"  # fmt: skip
        try:
            case = _case(H, tree, prefixes, page)
            got = fn(**case.args)
            row = {"case": desc, **_compare(case, got)}
            again = fn(**case.args)
            same_out = (again.out.view(np.uint16) == got.out.view(np.uint16)).all()
            row["rerun_bit_identical"] = bool(same_out and (again.lse.view(np.uint32) == got.lse.view(np.uint32)).all())
            if len(prefixes) > 1:
                one = case.with_args(
                    **{k: case.args[k][-1:] for k in ("q", "block_table", "prefix_lens", "visibility")}
                )
                alone = fn(**one.args)
                row["alone_bit_identical"] = bool((alone.out.view(np.uint16) == got.out[-1:].view(np.uint16)).all())
        except NotImplementedError as e:
            row = {"case": desc, "ok": None, "refused": str(e)}
        except Exception as e:
            row = {"case": desc, "ok": False, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(f"{label}: {row}", flush=True)
        rows.append(row)
    return {"available": True, "version": impl.version, "cases": rows}


def perf_shapes():
    import torch

    from harness import timing
    from harness.bench import peers, targets
    from harness.bench import verify_baselines as vb

    policy = timing.policy_from_env(warmup=2, min_reps=5, max_reps=30, budget_s=0.5)
    rows = []
    shapes = [(s, True) for s in PERF_SHAPES] + [(TREE_PERF, False)]
    for (H, Q, P, bs), chain in shapes:
        case = vb.make_case(bs, Q, H, P, device="cuda", chain=chain)
        row = {"shape": f"H{H} Q{Q} P{P // 1024}k bs{bs} {'chain' if chain else 'tree'}"}
        flush = max(timing.ROTATE_TARGET_BYTES, 2 * timing.l2_bytes())
        for variant in ("portable", "sm90a"):
            try:
                p = targets.prepare("tree_verify", variant, case.q, case.kv, case.block_table, case.prefix_lens,
                                    case.visibility, case.scale)  # fmt: skip
                p.launch()
                out, lse = targets.verify_outputs(p.results())
                row[f"{variant}_check"] = peers.check(case, out, lse)["ok"]
                plan = timing.l2_plan(vb.min_bytes(case), timing.l2_bytes())
                dev, _ = timing.device_times_us([p.launch], plan=plan, policy=policy)
                row[f"{variant}_us"] = round(timing.summary(dev)["median_us"], 1)
                p.finish()
            except Exception as e:
                row[f"{variant}_us"] = f"{type(e).__name__}: {str(e)[:120]}"
        for name in peers.CHAIN if chain else peers.CASCADES:
            try:
                fn = peers.prepare(name, case)
                out, lse = fn()
                chk = peers.check(case, out, lse)
                row[f"{name}_check"] = chk["ok"]
                if not chk["ok"]:
                    row[f"{name}_us"] = f"wrong: {chk}"
                    continue
                s = timing.torch_times_us(fn, flush_bytes=flush, policy=policy, hide_launch=True)
                row[f"{name}_us"] = round(timing.summary(s)["median_us"], 1)
            except Exception as e:
                row[f"{name}_us"] = f"{type(e).__name__}: {str(e)[:160]}"
        print("perf:", row, flush=True)
        rows.append(row)
        del case
        torch.cuda.empty_cache()
    return rows


@step("ceilings")
def ceilings():
    from harness.bench import ceilings as c

    rates = c.copy_rates()
    out = {k: round(v["gbs"], 1) for k, v in rates.items()}
    try:
        out["bf16_tflops"] = round(c.bf16_matmul()["tflops"], 1)
    except Exception as e:
        out["bf16_tflops"] = f"{type(e).__name__}: {e}"
    print("ceilings (GB/s; TFLOP/s):", out, flush=True)
    return out


@step("conformance")
def conformance(out_dir: pathlib.Path):
    """pytest conformance/test_tree_verify.py against every adapter at once, one report."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "dev")}
    impl_args = [f"--impl={t}" for t in ADAPTERS.values()]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "conformance/test_tree_verify.py",
           "conformance/test_fixtures.py", "-k", "tree_verify or verify", "--require-gpu",
           "-n", "8", "--report-dir", str(out_dir / "conformance"), *impl_args]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    (out_dir / "conformance.log").write_text(proc.stdout + proc.stderr)
    report = out_dir / "conformance" / "conformance.json"
    by = json.loads(report.read_text())["summary"]["by_impl"] if report.is_file() else {}
    print(proc.stdout[-3000:], flush=True)
    return {"returncode": proc.returncode, "by_impl": by}


def summary(out_dir: pathlib.Path) -> str:
    lines = ["peers smoke summary", "", f"{'step':<28} {'ok':<5} {'s':>6}  note"]
    for e in LOG:
        r = e.get("result")
        note = e.get("error", "")
        if isinstance(r, dict) and "cases" in r:
            cs = r["cases"]
            reruns = all(c.get("rerun_bit_identical", True) for c in cs if c.get("ok") is not None)
            alone = [c.get("alone_bit_identical") for c in cs if "alone_bit_identical" in c]
            note = (f"{sum(1 for c in cs if c.get('ok'))}/{len(cs)} cases within the clauses; "
                    f"refused {sum(1 for c in cs if c.get('ok') is None)}; reruns identical {reruns}; "
                    f"alone identical {alone}" if r.get("available") else f"unavailable: {r.get('why')}")  # fmt: skip
        elif isinstance(r, dict) and "by_impl" in r:
            note = "; ".join(f"{k}: {len(v['pass'])} pass, {len(v['fail'])} fail {v['fail']}, "
                             f"{len(v['not claimed'])} not claimed" for k, v in r["by_impl"].items())  # fmt: skip
        elif isinstance(r, dict):
            note = json.dumps(r, default=str)[:300]
        lines.append(f"{e['step']:<28} {e['ok']!s:<5} {e['s']:>6}  {note}")
    perf = next((e.get("result") for e in LOG if e["step"] == "perf comparators"), None) or []
    if perf:
        keys = [k for k in perf[0] if k.endswith("_us")]
        for r in perf[1:]:
            keys += [k for k in r if k.endswith("_us") and k not in keys]
        lines += ["", "perf (µs, median; 'wrong' = failed the oracle check):", " | ".join(["shape", *keys])]
        lines += [" | ".join([r["shape"], *(str(r.get(k, "—"))[:40] for k in keys)]) for r in perf]
    text = "\n".join(lines) + "\n"
    (out_dir / "summary.txt").write_text(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--conformance", action="store_true", help="also run the tree_verify suite on every adapter")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    environment()
    for label, target in ADAPTERS.items():
        step(f"adapter {label}")(adapter_cases)(label, target)
    step("perf comparators")(perf_shapes)()
    ceilings()
    if args.conformance:
        conformance(args.out)
    (args.out / "smoke.json").write_text(json.dumps(LOG, indent=1, default=str))
    print(summary(args.out), flush=True)
    return 0 if all(e["ok"] for e in LOG) else 1


if __name__ == "__main__":
    sys.exit(main())
