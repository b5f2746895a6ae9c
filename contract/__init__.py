"""The ops' contracts, written once: argument names, dtypes, shapes and limits, the one `validate()` per
op, the result types, and the KDTR tensor names of inputs and outputs.

The bottom layer: `reference/`, `kernels_cu/`, the engine adapter and the tests import it; it imports none
of them (meta/test_layers.py enforces the direction).
"""

from __future__ import annotations

from . import limits
from .checks import BF16, ArrayInfo, InputError
from .draft_topk import CONTRACT as DRAFT_TOPK
from .draft_topk import TopK
from .op import Checked, OpContract
from .tree_accept import CONTRACT as TREE_ACCEPT
from .tree_accept import Accept
from .tree_build import CONTRACT as TREE_BUILD
from .tree_build import Tree, full_mask_bytes
from .tree_verify import CONTRACT as TREE_VERIFY
from .tree_verify import Verified

OPS: dict[str, OpContract] = {c.slug: c for c in (TREE_BUILD, TREE_VERIFY, TREE_ACCEPT, DRAFT_TOPK)}

__all__ = [
    "BF16",
    "DRAFT_TOPK",
    "OPS",
    "TREE_ACCEPT",
    "TREE_BUILD",
    "TREE_VERIFY",
    "Accept",
    "ArrayInfo",
    "Checked",
    "InputError",
    "OpContract",
    "TopK",
    "Tree",
    "Verified",
    "full_mask_bytes",
    "limits",
]
