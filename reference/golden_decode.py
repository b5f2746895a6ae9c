"""Golden greedy decoding with the numpy model (reference/decode.py), written as a KDTR file in the same
layout as `kdtree-engine decode` writes (tokens, margins, lengths, cache [, accept_lens, rounds]).

    python -m reference.golden_decode --model M.kdtr --prompt P.kdtr --max-new N --out OUT.kdtr
                                      [--mode ar|ddtree --budget B --depth L --noise S --draft-temp T --seed X]

It pins numpy's BLAS to one thread before importing numpy: the model's matmuls are tiny, and a threaded
BLAS sharing a small machine with other processes spends far longer spinning than computing. (Run as a
module, the `reference` package is imported first; it imports nothing, so numpy still comes after the pin.)
"""

from __future__ import annotations

import argparse
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

import kdtr  # noqa: E402
from reference.decode import generate_ar, generate_ddtree  # noqa: E402
from reference.model import Model  # noqa: E402


def load_prompts(path) -> list[np.ndarray]:
    """The prompts of a KDTR file: `tokens` rows cut to `lengths` (whole rows without it)."""
    f = kdtr.load(path)
    tokens = np.array(f["tokens"])
    lengths = np.array(f["lengths"]) if "lengths" in f else np.full(len(tokens), tokens.shape[1])
    return [tokens[b, : lengths[b]] for b in range(len(tokens))]


def _filled(field: np.ndarray | None) -> np.ndarray:
    """A Run field its mode always fills (margins for AR, accept_lens for DDTree)."""
    if field is None:
        raise ValueError("a decode run lacks the field its mode fills")
    return field


def main(argv=None) -> None:
    """Decode the prompts with the numpy model and write the KDTR file."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-new", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=["ar", "ddtree"], default="ar")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--noise", type=float, default=0.5)
    ap.add_argument("--draft-temp", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    model = Model.load(a.model)
    prompts = load_prompts(a.prompt)
    if a.mode == "ar":
        runs = generate_ar(model, prompts, a.max_new)
    else:
        kw = {"budget": a.budget, "depth": a.depth, "seed": a.seed, "noise_scale": a.noise, "temperature": a.draft_temp}
        runs = [generate_ddtree(model, p, a.max_new, **kw) for p in prompts]
    bs, layers, T = len(runs), model.cfg.n_layers, max(r.cache.shape[1] for r in runs)
    cache = np.zeros((layers, bs, T, runs[0].cache.shape[2]), np.float32)
    for b, r in enumerate(runs):
        cache[:, b, : r.cache.shape[1]] = r.cache
    out = {
        "tokens": np.stack([r.tokens for r in runs]),
        "lengths": np.array([r.cache.shape[1] for r in runs], np.int32),
        "cache": cache,
    }
    if a.mode == "ar":
        out["margins"] = np.stack([_filled(r.margins) for r in runs])
    else:
        accepts = [_filled(r.accept_lens) for r in runs]
        out["accept_lens"] = np.full((bs, max(len(x) for x in accepts)), -1, np.int32)
        for b, x in enumerate(accepts):
            out["accept_lens"][b, : len(x)] = x
        out["rounds"] = np.array([len(x) for x in accepts], np.int32)
    kdtr.save(a.out, out, {"mode": a.mode, "engine": "reference numpy"})


if __name__ == "__main__":
    main()
