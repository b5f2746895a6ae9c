"""Adapters for implementations from outside this repository: the protocol an external implementation
follows (`protocol`), and the adapters this project ships for the public MLA decode kernels (FlashMLA,
FlashInfer MLA, and a cascade that gives them any tree). `--impl module:attribute` or an installed package's
entry point (group `kdtree_conformance.implementations`) puts one under test (docs/ADAPTERS.md).

Like the kernels, adapters import the contract only, never the harness or the references.
"""

from .protocol import Capabilities, Implementation, Op

ENTRY_POINT_GROUP = "kdtree_conformance.implementations"

__all__ = ["ENTRY_POINT_GROUP", "Capabilities", "Implementation", "Op"]
