"""The set-up of one DDTree step on the device (spec/step.md, ST.1.1): the arguments that are the step's own (the
ops' are checked by their contracts), checked by name before any GPU work."""

from __future__ import annotations

import numpy as np

from . import checks as c
from . import limits

OPS = ("draft_topk", "tree_build", "tree_verify", "tree_accept")
LOGITS_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": c.BF16}


def check_setup(*, L, V, K, budget, H, logits_dtype) -> dict:
    """{L, V, K, budget, H, logits_dtype (a numpy dtype)}, each checked by name."""
    out = {"L": c.integer("L", L, 1, limits.MAX_DEPTH), "V": c.integer("V", V, 1, limits.MAX_VOCAB)}
    out["K"] = c.integer("K", K, 1, min(limits.MAX_TOPK, out["V"]))
    out["budget"] = c.integer("budget", budget, 1, limits.MAX_BUDGET)
    out["H"] = c.integer("H", H, 1, limits.MAX_HEADS)
    if not isinstance(logits_dtype, str) or logits_dtype not in LOGITS_DTYPES:  # a list is no name (nor hashable)
        c.fail("logits_dtype", f"{logits_dtype!r}, expected one of {', '.join(LOGITS_DTYPES)}")
    out["logits_dtype"] = LOGITS_DTYPES[logits_dtype]
    return out


def check_variants(asked: dict, known: dict[str, list[str]]) -> None:
    """`asked` ({op: variant}) names ops of the step and variants they have (`known`: {op: its variants})."""
    unknown = set(asked) - set(OPS)
    if unknown:
        c.fail("variants", f"{', '.join(sorted(unknown))} is not an op of the step ({', '.join(OPS)})")
    for slug, name in asked.items():
        if name not in known[slug]:
            c.fail("variants", f"{slug} has no variant {name!r} (it has {', '.join(known[slug])})")


def check_round_input(name: str, shape, dtype, buffers: dict) -> None:
    """A round's input `name` of `shape` and `dtype` fits its buffer ({name: (shape, dtype)})."""
    if name not in buffers:
        c.fail(name, f"not an input of a round (they are {', '.join(buffers)})")
    want_shape, want_dtype = buffers[name]
    try:
        got = np.dtype(dtype)
    except TypeError:  # not a dtype at all ("bogus"): named as given, in the same message
        got = None
    if tuple(shape) != tuple(want_shape) or got != want_dtype:
        shown = got if got is not None else f"{dtype!r} (not a dtype)"
        c.fail(name, f"shape {tuple(shape)} dtype {shown}, expected {tuple(want_shape)} {want_dtype}")
