"""Are the tree_build kernels of the working tree bit-identical in their outputs to those of another revision?

    python -m lab.tree_build_identity --before REV [--seeds N] [--variants a,b] [--json F]     # on a GPU

Builds the tree_build kernels of the working tree and of git revision REV (`git archive` of REV's Python packages and
kernels into a temporary directory) and runs both, each in its own Python process over its own `kernels_cu`, on one
deterministic set of inputs: `--seeds` seeds (default 48), every tree_build variant of both trees (the `_99k` twins
included; select_race also with the knob race_min_b = 1, so that it races at every budget, and with batches wider
than a wave of races), budgets 0 to 1024, depths 0 to 32, top-k 1 to 1024, rows with many exactly equal log-probs
(ties in score, decided by the rank tuple), -inf and -0.0 entries, prefix lengths and the FULL_MASK layout. Every
output array of every call is compared byte for byte. Prints a summary; exit status 0 when every output is
identical, 1 on any difference, 2 when it cannot run (no such revision, no GPU, a side failed).

The parts that need no GPU (arguments, the input set, the comparison) are tested in meta/test_tree_build_identity.py.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
# What a side needs to build and launch its kernels (the wrapper imports the contract and kernels_cu; this script
# itself is run from the working tree as the worker of both sides, with the side's tree first on sys.path).
PACKAGES = ("contract", "kernels_cu")
FIELDS = (
    "n_nodes", "parents", "depths", "tokens", "ranks", "scores", "visibility", "positions", "first_child",
    "next_sibling", "full_mask",
)  # fmt: skip
MAX_BUDGET, MAX_DEPTH, MAX_TOPK = 1024, 32, 1024


class UsageError(Exception):
    """The check cannot run as asked (exit status 2)."""


# ---- the inputs ----------------------------------------------------------------------------------------------------
def _shape(rng: np.random.Generator, seed: int) -> tuple[int, int, int, int]:
    """(bs, B, L, K_in) for one seed: the edges first, then a spread up to the contract's limits."""
    fixed = [
        (1, 0, 4, 8), (2, 1, 1, 1), (3, 16, 0, 16), (1, 1024, 32, 1024), (4, 1024, 15, 8), (2, 64, 32, 64),
        (5, 256, 15, 64), (1, 512, 8, 1024), (3, 1023, 31, 33), (300, 256, 15, 32), (300, 1024, 3, 16),
    ]  # fmt: skip
    if seed < len(fixed):
        return fixed[seed]
    B = int(rng.choice([1, 2, 7, 16, 31, 32, 33, 64, 100, 128, 255, 256, 257, 511, 512, 700, 1024]))
    L = int(rng.integers(1, MAX_DEPTH + 1))
    K_in = int(rng.choice([1, 2, 3, 8, 17, 32, 64, 100, 256, 1024]))
    bs = int(rng.choice([1, 2, 3, 5, 8]))
    return bs, B, L, K_in


def _rows(rng: np.random.Generator, shape: tuple[int, int, int], family: str) -> np.ndarray:
    """Sorted (non-increasing) log-prob rows of `family`: float32, <= 0, no NaN."""
    if family == "ties":  # few distinct values: many exactly equal scores, decided by the rank tuples
        x = -rng.integers(0, 4, size=shape).astype(np.float32) * np.float32(0.5)
    elif family == "peaked":  # one near-certain token per row, the rest far below
        x = np.log(rng.dirichlet(np.full(shape[-1], 0.05), size=shape[:-1]).astype(np.float64) + 1e-30)
        x = x.astype(np.float32)
    elif family == "inf":  # -inf tails (a row with fewer finite candidates than K_in) and -0.0 heads
        x = -rng.exponential(2.0, size=shape).astype(np.float32)
        cut = rng.integers(0, shape[-1] + 1, size=shape[:-1])
        x[np.arange(shape[-1]) >= cut[..., None]] = -np.inf
        x[..., 0] = np.where(rng.random(shape[:-1]) < 0.3, np.float32(-0.0), x[..., 0])
    else:  # "random": bf16-like values (8 significant bits: ties in sums happen)
        x = -rng.exponential(1.5, size=shape)
        x = (np.round(x * 128) / 128).astype(np.float32)
    x = -np.sort(-x, axis=-1, kind="stable")  # non-increasing; keeps -0.0 and -inf
    return np.minimum(x, np.float32(0.0)).astype(np.float32) if family != "inf" else x


def cases(seeds: int) -> list[dict]:
    """The deterministic input set: one call per seed, as the contract's keyword arguments (numpy, host), plus the
    case's name. The same on both sides: this function runs in the worker of each."""
    families = ("random", "ties", "peaked", "inf")
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(1_000_003 * seed + 17)
        bs, B, L, K_in = _shape(rng, seed)
        family = families[seed % len(families)]
        lp = _rows(rng, (bs, L, K_in), family)
        rows = [rng.permutation(max(K_in * 4, 64))[:K_in] for _ in range(bs * L)]  # distinct ids per row
        ids = (np.stack(rows) if rows else np.zeros((0, K_in))).astype(np.int32).reshape(bs, L, K_in)
        roots = rng.integers(0, 1 << 20, size=bs).astype(np.int32)
        prefix = rng.integers(0, 64, size=bs).astype(np.int32) if seed % 3 else np.zeros(bs, np.int32)
        full_mask = bs * (B + 1) * (int(prefix.sum()) // bs + B + 1) <= 1 << 22 and seed % 2 == 0
        out.append({
            "name": f"s{seed}-{family}-bs{bs}-B{B}-L{L}-K{K_in}" + ("-fm" if full_mask else ""),
            "args": {"top_logp": lp, "top_ids": ids, "root_tokens": roots, "budget": B, "prefix_lens": prefix,
                     "with_full_mask": bool(full_mask)},
        })  # fmt: skip
    return out


# ---- the comparison ------------------------------------------------------------------------------------------------
def compare(before: dict[str, np.ndarray], after: dict[str, np.ndarray], limit: int = 5) -> list[str]:
    """The differences between two runs' outputs ({key: array}, key = 'variant|case|knob|field'), as lines: keys only
    one side has, then per key a dtype, shape or byte difference (the first differing elements, up to `limit`)."""
    lines = [f"{k}: only after" for k in sorted(set(after) - set(before))]
    lines += [f"{k}: only before" for k in sorted(set(before) - set(after))]
    for k in sorted(set(before) & set(after)):
        a, b = np.asarray(before[k]), np.asarray(after[k])
        if a.dtype != b.dtype or a.shape != b.shape:
            lines.append(f"{k}: {a.dtype}{list(a.shape)} before, {b.dtype}{list(b.shape)} after")
            continue
        if a.tobytes() == b.tobytes():
            continue
        av, bv = a.reshape(-1), b.reshape(-1)
        # element by element on the bytes (a NaN or -0.0 differs from itself by value but not by bits)
        ab = av.view(np.uint8).reshape(av.size, -1) if av.size else av
        bb = bv.view(np.uint8).reshape(bv.size, -1) if bv.size else bv
        idx = np.nonzero((ab != bb).any(axis=-1))[0]
        where = ", ".join(
            f"[{','.join(map(str, np.unravel_index(i, a.shape)))}] {av[i].item()!r} -> {bv[i].item()!r}"
            for i in idx[:limit]
        )
        lines.append(f"{k}: {idx.size} of {av.size} elements differ: {where}")
    return lines


def summary(before: dict, after: dict, diffs: list[str], rev: str) -> str:
    calls = {k.rsplit("|", 1)[0] for k in after}
    variants = sorted({k.split("|", 1)[0] for k in after})
    head = (
        f"tree_build identity, working tree vs {rev}: {len(calls)} calls of {len(variants)} builds "
        f"({', '.join(variants)}), {len(after)} output arrays compared byte for byte"
    )
    if not diffs:
        return head + ": all identical"
    return head + f": {len(diffs)} differ\n" + "\n".join("  " + d for d in diffs)


# ---- the two sides -------------------------------------------------------------------------------------------------
def resolve(rev: str) -> str:
    """REV's commit hash (UsageError when git does not know it)."""
    r = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=ROOT,
                       capture_output=True, text=True)  # fmt: skip
    if r.returncode or not r.stdout.strip():
        raise UsageError(f"--before {rev!r}: no such revision in {ROOT}")
    return r.stdout.strip()


def export(commit: str, dest: pathlib.Path) -> pathlib.Path:
    """REV's PACKAGES, as git archive writes them, under dest (the side's root)."""
    tar = dest / "rev.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "archive", "--format=tar", commit, *PACKAGES], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(tar) as t:
        t.extractall(dest / "tree", filter="data")
    return dest / "tree"


def run_side(tree: pathlib.Path, seeds: int, variants: list[str] | None, out: pathlib.Path) -> dict:
    """Run the worker with `tree` first on sys.path; returns its outputs {key: array}."""
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", str(out), "--seeds", str(seeds)]
    if variants:
        cmd += ["--variants", ",".join(variants)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if r.returncode:
        raise UsageError(f"the run of {tree} failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    with np.load(out, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def worker(out: str, seeds: int, variants: list[str] | None) -> None:
    """The side's run (its own kernels_cu first on sys.path): every variant on every case; outputs to `out`."""
    from kernels_cu import runtime, specs, tree_build_ops

    names = [s.variant for s in specs.for_op("tree_build")]
    chosen = [v for v in names if variants is None or v in variants]
    results: dict[str, np.ndarray] = {}
    for v in chosen:
        spec = specs.get("tree_build", v)
        knobs = [None, 1] if "race_min_b" in spec.knobs else [None]
        for c in cases(seeds):
            for knob in knobs:
                fn = tree_build_ops.bind(spec, race_min_b=knob)
                tree = fn(**c["args"])
                for f in FIELDS:
                    results[f"{v}|{c['name']}|race_min_b={knob}|{f}"] = np.asarray(getattr(tree, f))
        print(f"{v}: {len(cases(seeds))} cases on {runtime.gpu().arch}", flush=True)
    np.savez(out, **results)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lab.tree_build_identity", description=__doc__.split("\n\n")[0])
    p.add_argument("--before", help="the git revision to compare the working tree with (required)")
    p.add_argument("--seeds", type=int, default=48, help="inputs: one call per seed (default 48)")
    p.add_argument("--variants", help="comma-separated tree_build variants (default: every one)")
    p.add_argument("--json", help="write the differences and the summary here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.seeds < 1:
        raise UsageError(f"--seeds {a.seeds}: at least one")
    if a.worker is None and not a.before:
        raise UsageError("--before REV is required (the revision to compare with, e.g. d10a513)")
    return a


Runner = Callable[[pathlib.Path, int, "list[str] | None", pathlib.Path], dict]


def main(
    argv: list[str] | None = None, runner: Runner = run_side, gpu_ok: Callable[[], tuple[bool, str]] | None = None
) -> int:
    """The check (exit status: 0 identical, 1 a difference, 2 cannot run). runner and gpu_ok: the tests' stand-ins
    for a side's run and the GPU probe."""
    try:
        a = parse(sys.argv[1:] if argv is None else argv)
        variants = a.variants.split(",") if a.variants else None
        if a.worker:
            worker(a.worker, a.seeds, variants)
            return 0
        commit = resolve(a.before)
        if gpu_ok is None:
            from kernels_cu import cuda_env

            p = cuda_env.probe()
            ok, why = p.ok, p.reason
        else:
            ok, why = gpu_ok()
        if not ok:
            raise UsageError(f"no GPU: {why} (the kernels must run to be compared)")
        with tempfile.TemporaryDirectory(prefix="tb-identity-") as tmp:
            t = pathlib.Path(tmp)
            old_tree = export(commit, t)
            before = runner(old_tree, a.seeds, variants, t / "before.npz")
            after = runner(ROOT, a.seeds, variants, t / "after.npz")
    except UsageError as e:
        print(f"tree_build_identity: {e}", file=sys.stderr)
        return 2
    diffs = compare(before, after)
    text = summary(before, after, diffs, f"{a.before} ({commit[:10]})")
    print(text)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"before": commit, "differences": diffs, "summary": text}, indent=1))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
