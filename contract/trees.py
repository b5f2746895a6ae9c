"""Tree checks and layouts shared by the contracts and the references: the visibility bitmask (bit j of row
i, little-endian uint32 words: j is i or an ancestor of i) and first_child/next_sibling link lists.

Everything works on the packed words and is vectorised over requests, so checking the largest tree of the
largest batch costs a few times the input's own size (never the bs·Q·Q bytes of an unpacked mask).
"""

from __future__ import annotations

import numpy as np

from .checks import fail, first_bad


def unpack_visibility(vis: np.ndarray, D: int) -> np.ndarray:
    """uint32 little-endian bit words [..., D, W] -> bool [..., D, D]."""
    bytes_le = vis.astype("<u4").view(np.uint8)
    return np.unpackbits(bytes_le, axis=-1, bitorder="little")[..., :D].astype(bool)


def _bit_masks(Q: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    """[Q, W] words: bits j <= i ('allowed'), and bit i alone ('own')."""
    j = np.arange(W * 32).reshape(W, 32)
    allowed = np.zeros((Q, W), np.uint32)
    own = np.zeros((Q, W), np.uint32)
    weights = np.uint32(1) << np.arange(32, dtype=np.uint32)
    for w in range(W):  # W <= 33 iterations, each vectorised over rows
        allowed[:, w] = ((j[w][None, :] <= np.arange(Q)[:, None]) * weights).sum(axis=1, dtype=np.uint64)
        own[:, w] = ((j[w][None, :] == np.arange(Q)[:, None]) * weights).sum(axis=1, dtype=np.uint64)
    return allowed, own


def _highest_bit(words: np.ndarray) -> np.ndarray:
    """Index of the highest set bit over the last axis of uint32 words; -1 where all are zero."""
    nz = words != 0
    last = words.shape[-1] - 1 - np.argmax(nz[..., ::-1], axis=-1)
    top = np.take_along_axis(words, last[..., None], axis=-1)[..., 0]
    _, exp = np.frexp(top.astype(np.float64))  # exact for integers < 2**53: value in [2**(exp-1), 2**exp)
    return np.where(nz.any(axis=-1), last * 32 + exp - 1, -1)


def check_visibility(arg: str, vis: np.ndarray, Q: int) -> None:
    """The mask is the ancestor-or-self closure of a tree whose parents precede children: row i has bit i
    and bit 0, nothing above i, and equals its parent's row plus bit i, where the parent is the highest
    other bit set. Bits beyond Q in the last word are 0."""
    bs, _, W = vis.shape
    if Q % 32 and (vis[..., W - 1] >> np.uint32(Q % 32)).any():
        fail(arg, f"bits beyond Q={Q} are set")
    allowed, own = _bit_masks(Q, W)
    sees_self = (vis & own[None]).any(axis=-1)
    if not sees_self.all():
        b, i = first_bad(~sees_self)
        fail(arg, f"request {b} row {i} does not see itself")
    if not (vis[..., 0] & 1).all():
        b, i = first_bad((vis[..., 0] & 1) == 0)
        fail(arg, f"request {b} row {i} does not see the root")
    later = vis & ~allowed[None]
    if later.any():
        b, i = first_bad(later.any(axis=-1))
        j = int(_highest_bit(later[b, i][None])[0])
        fail(arg, f"request {b} row {i} sees a later row {j} (not a tree with parents before children)")
    parent = _highest_bit(vis & ~own[None])  # [bs, Q]; -1 for row 0
    expect = vis[np.arange(bs)[:, None], np.maximum(parent, 0)] | own[None]
    expect[:, 0] = own[0]
    bad = (expect != vis).any(axis=-1)
    if bad.any():
        b, i = first_bad(bad)
        fail(arg, f"request {b} row {i} is not its parent's row plus itself (not an ancestor closure)")


def check_links(arg_fc: str, first_child: np.ndarray, arg_ns: str, next_sibling: np.ndarray) -> None:
    """first_child/next_sibling [bs, D] describe a forest hanging off node 0 in which every link points to
    a larger index (parents before children, siblings ascending) and no node has two incoming links; nodes
    with no incoming link (pads) are allowed, the root must have none and no sibling."""
    bs, D = first_child.shape
    if (next_sibling[:, 0] != -1).any():
        fail(arg_ns, f"root of request {int(np.argmax(next_sibling[:, 0] != -1))} has a sibling")
    idx = np.arange(D)[None, :]
    for arg, a in ((arg_fc, first_child), (arg_ns, next_sibling)):
        bad = (a != -1) & ((a <= idx) | (a >= D))
        if bad.any():
            b, u = first_bad(bad)
            fail(
                arg,
                f"[{b}, {u}] = {int(a[b, u])} must be -1 or an index in {u + 1}..{D - 1} (cyclic or non-prefix tree)",
            )
    incoming = np.zeros((bs, D), np.int64)
    for a in (first_child, next_sibling):
        b, _ = np.nonzero(a >= 0)
        np.add.at(incoming, (b, a[a >= 0]), 1)
    if (incoming > 1).any():
        b, u = first_bad(incoming > 1)
        fail(
            arg_fc,
            f"request {b}: node {u} has more than one incoming link (first_child/next_sibling do not form a tree)",
        )


def parents_from_links(first_child: np.ndarray, next_sibling: np.ndarray) -> np.ndarray:
    """Parent of every node reachable from the root (-1 elsewhere), for valid links (check_links first).
    Links point forward, so one pass in index order settles every node, vectorised over requests."""
    bs, D = first_child.shape
    parent = np.full((bs, D), -1, np.int64)
    reached = np.zeros((bs, D), bool)
    reached[:, 0] = True
    rows = np.arange(bs)
    for u in range(D):
        fc, ns = first_child[:, u], next_sibling[:, u]
        ok = reached[:, u] & (fc >= 0)
        parent[rows[ok], fc[ok]] = u
        reached[rows[ok], fc[ok]] = True
        ok = reached[:, u] & (ns >= 0) & (u > 0)
        parent[rows[ok], ns[ok]] = parent[rows[ok], u]
        reached[rows[ok], ns[ok]] = True
    return parent


def depths_from_parents(parent: np.ndarray) -> np.ndarray:
    """Depth of every node with parent[i] < i (root and unreached nodes 0), vectorised over requests."""
    bs, D = parent.shape
    depth = np.zeros((bs, D), np.int64)
    for i in range(1, D):
        p = parent[:, i]
        depth[:, i] = np.where(p >= 0, depth[np.arange(bs), np.maximum(p, 0)] + 1, 0)
    return depth
