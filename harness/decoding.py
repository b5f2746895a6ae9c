"""Running greedy decodes (the engine's `decode` subcommand, the golden numpy model) and comparing them.

Both write the same KDTR layout (tokens [bs, N], margins [bs, N], lengths, cache, accept_lens, ...), read
back here as plain dicts of arrays. `greedy_equivalence` applies the rule of spec/engine.md (EN.4): two
greedy runs must agree token for token, except that a divergence at a step whose reference top-1/top-2
logit margin is below δ is allowed, counted, and the comparison resumes from the reference token.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import sys

import numpy as np

import kdtr

from . import tools

ROOT = pathlib.Path(__file__).resolve().parent.parent
DELTA = 1e-3  # δ: the top-2 logit margin below which two fp32 implementations may pick differently
# The decode equivalence runs of spec/engine.md (EN.4, EN.5): prompts, lengths and the DDTree settings.
N_PROMPTS, MAX_NEW = 20, 64
BUDGET, DEPTH, NOISE = 16, 8, 0.5


# The decode's host<->device traffic (spec/engine.md EN.5.3): io_<phase>_<counter> int64 scalars per phase.
IO_PHASES = ("decode", "drafter", "draft_topk", "tree_build", "tree_accept")
IO_COUNTERS = ("h2d_bytes", "d2h_bytes", "h2d_copies", "d2h_copies", "syncs")


def traffic(run: dict, phase: str) -> dict[str, int]:
    """One phase's host<->device traffic in a decode's output (engine_decode), counter -> count."""
    return {c: int(run[f"io_{phase}_{c}"]) for c in IO_COUNTERS}


def make_prompts(n: int, seed: int = 0) -> list[list[int]]:
    """n seeded prompts of 4-16 token ids of the tiny model's vocabulary."""
    from reference.model import Config

    rng = np.random.default_rng(seed)
    return [rng.integers(0, Config().vocab, int(rng.integers(4, 17))).tolist() for _ in range(n)]


def write_prompts(path: pathlib.Path, prompts) -> None:
    """prompts (lists of token ids) -> tokens i32 [bs, longest] (zero padded) and lengths i32 [bs]."""
    longest = max(len(p) for p in prompts)
    tokens = np.zeros((len(prompts), longest), np.int32)
    for b, p in enumerate(prompts):
        tokens[b, : len(p)] = p
    kdtr.save(path, {"tokens": tokens, "lengths": np.array([len(p) for p in prompts], np.int32)})


def _read(path: pathlib.Path) -> dict[str, np.ndarray]:
    f = kdtr.load(path)
    return {k: np.array(f[k]) for k in f.infos} | {"metadata": f.metadata}


def engine_decode(model: pathlib.Path, prompts, workdir: pathlib.Path, *, mode: str, max_new: int, **opts) -> dict:
    """`kdtree-engine decode` on these prompts; opts: budget, depth, noise, draft_temp, seed, threads, device,
    variant, and the flags dump_cache and host_topk (True adds --dump-cache, --host-topk). Raises RuntimeError
    with the engine's message on failure."""
    workdir.mkdir(parents=True, exist_ok=True)
    prompt_file, out = workdir / f"prompts-{mode}.kdtr", workdir / f"engine-{mode}.kdtr"
    write_prompts(prompt_file, prompts)
    cmd = [str(tools.binary("kdtree-engine")), "decode", "--model", str(model), "--prompt", str(prompt_file)]
    cmd += ["--mode", mode, "--max-new", str(max_new), "--out", str(out)]
    for k, val in opts.items():
        if isinstance(val, bool):  # a flag
            cmd += [f"--{k.replace('_', '-')}"] if val else []
        else:
            cmd += [f"--{k.replace('_', '-')}", str(val)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if run.returncode != 0:
        raise RuntimeError(f"kdtree-engine decode exited {run.returncode}: {run.stderr}")
    return _read(out)


def golden_decode(model: pathlib.Path, prompts, workdir: pathlib.Path, *, mode: str = "ar", max_new: int, **opts):
    """reference/golden_decode.py (the numpy model; one BLAS thread) on these prompts, run as a module from the
    repository root."""
    workdir.mkdir(parents=True, exist_ok=True)
    prompt_file, out = workdir / f"golden-prompts-{mode}.kdtr", workdir / f"golden-{mode}.kdtr"
    write_prompts(prompt_file, prompts)
    cmd = [sys.executable, "-m", "reference.golden_decode", "--model", str(pathlib.Path(model).resolve())]
    cmd += [
        "--prompt",
        str(prompt_file.resolve()),
        "--mode",
        mode,
        "--max-new",
        str(max_new),
        "--out",
        str(out.resolve()),
    ]
    for k, val in opts.items():
        cmd += [f"--{k.replace('_', '-')}", str(val)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    if run.returncode != 0:
        raise RuntimeError(f"golden_decode.py exited {run.returncode}: {run.stderr}")
    return _read(out)


@dataclasses.dataclass
class Equivalence:
    """Outcome of greedy_equivalence: (request, step, reference margin) per divergence."""

    compared: int = 0  # tokens compared
    allowed: list = dataclasses.field(default_factory=list)  # margin < δ: counted, resumed
    failures: list = dataclasses.field(default_factory=list)  # margin >= δ: a real mismatch

    def summary(self) -> str:
        return (
            f"{self.compared} tokens compared, {len(self.allowed)} near-tie divergences (margin < {DELTA:g}) "
            f"{self.allowed}, {len(self.failures)} failures {self.failures}"
        )


def report(request, name: str, eq) -> None:
    """Put an equivalence's summary in the test's report properties (the conformance report shows them) and
    on stdout."""
    request.node.user_properties.append((name, eq.summary()))
    print(f"{name}: {eq.summary()}")


def greedy_equivalence(prompts, max_new: int, reference: dict, candidate: dict, rerun, delta: float = DELTA):
    """Compare candidate's tokens with reference's (whose margins decide), request by request. After an
    allowed divergence at step i, both are rerun (rerun(prompts, max_new) -> (reference, candidate)) from
    the prompt plus the reference's first i+1 tokens for the remaining steps."""
    eq = Equivalence()
    pending = [(b, [int(t) for t in p], max_new, 0, k) for k, (b, p) in enumerate(enumerate(prompts))]
    while pending:
        again = []
        for b, prompt, left, offset, row in pending:
            ref_tok, got_tok = reference["tokens"][row, :left], candidate["tokens"][row, :left]
            diff = np.flatnonzero(ref_tok != got_tok)
            eq.compared += left if not diff.size else int(diff[0]) + 1
            if not diff.size:
                continue
            i = int(diff[0])
            margin = float(reference["margins"][row, i])
            record = (b, offset + i, margin)
            if margin >= delta:
                eq.failures.append(record)
                continue
            eq.allowed.append(record)
            if left - i - 1 > 0:
                again.append((b, prompt + ref_tok[: i + 1].tolist(), left - i - 1, offset + i + 1))
        if not again:
            break
        reference, candidate = rerun([p for _, p, _, _ in again], max(left for *_, left, _ in again))
        pending = [(b, p, left, off, k) for k, (b, p, left, off) in enumerate(again)]
    return eq
