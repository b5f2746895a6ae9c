"""The step's own host checks (contract/step.py: set-up, variants, a round's inputs) and tree_accept's advance
precondition (contract/tree_accept.check_advance): not an op's validate_host(), so the generator cannot make their
cases. They are written here once, one refused case per fail() with the message it must match, and the accepted
arguments beside them: conformance/test_step.py checks the messages, meta/test_boundaries.py that these cases and the
generated ones together reach every fail() of contract/."""

from __future__ import annotations

import numpy as np

from contract import BF16
from contract import step as step_contract
from contract import tree_accept as ta_contract

SETUP = dict(L=4, V=300, K=4, budget=12, H=2, logits_dtype="bfloat16")
BUFFERS = {"logits": ((2, 4, 300), BF16), "q": ((2, 13, 2, 576), BF16), "target_tokens": ((2, 13), np.dtype(np.int32))}
VARIANTS = {"draft_topk": ["prefilter"], "tree_build": ["select_race"], "tree_verify": ["portable"],
            "tree_accept": ["pointer_jump"]}  # fmt: skip


def _setup(**change):
    return lambda: step_contract.check_setup(**{**SETUP, **change})


# {case: (a call the checks refuse, the message its InputError matches)}
REFUSED = {
    "L": (_setup(L=33), r"L: 33 is outside 1\.\.32"),
    "V": (_setup(V=0), r"V: 0 is outside 1\.\.262144"),
    "K": (_setup(K=301), r"K: 301 is outside 1\.\.300"),
    "budget": (_setup(budget=0), r"budget: 0 is outside 1\.\.1024"),
    "H": (_setup(H=129), r"H: 129 is outside 1\.\.128"),
    "logits_dtype": (_setup(logits_dtype="int8"), r"logits_dtype: 'int8', expected one of float32, float16, bfloat16"),
    "logits_dtype_list": (
        _setup(logits_dtype=["float32"]),
        r"logits_dtype: \['float32'\], expected one of float32, float16, bfloat16",
    ),
    "unknown_op": (
        lambda: step_contract.check_variants({"draft": "x"}, VARIANTS),
        r"variants: draft is not an op of the step",
    ),
    "unknown_variant": (
        lambda: step_contract.check_variants({"tree_build": "nope"}, VARIANTS),
        r"variants: tree_build has no variant 'nope' \(it has select_race\)",
    ),
    "round_name": (
        lambda: step_contract.check_round_input("logit", (2, 4, 300), BF16, BUFFERS),
        r"logit: not an input of a round \(they are logits, q, target_tokens\)",
    ),
    "round_shape": (
        lambda: step_contract.check_round_input("logits", (2, 4, 301), BF16, BUFFERS),
        r"logits: shape \(2, 4, 301\) dtype bfloat16, expected \(2, 4, 300\) bfloat16",
    ),
    "round_dtype": (
        lambda: step_contract.check_round_input("target_tokens", (2, 13), np.int64, BUFFERS),
        r"target_tokens: shape \(2, 13\) dtype int64, expected \(2, 13\) int32",
    ),
    "round_dtype_bogus": (
        lambda: step_contract.check_round_input("target_tokens", (2, 13), "bogus", BUFFERS),
        r"target_tokens: shape \(2, 13\) dtype 'bogus' \(not a dtype\), expected \(2, 13\) int32",
    ),
    "advance_without_commit": (
        lambda: ta_contract.check_advance(has_commit=False),
        r"advance_roots: the advance moves prefix_lens, so it needs the commit",
    ),
}

# calls the same checks accept
ACCEPTED = (
    _setup(),
    lambda: step_contract.check_variants({"tree_build": "select_race"}, VARIANTS),
    lambda: step_contract.check_round_input("logits", (2, 4, 300), BF16, BUFFERS),
    lambda: ta_contract.check_advance(has_commit=True),
)
