"""How to put a case on the edge of each kind of value check (contract.op.BOUND_KINDS): one generator per kind,
adding the case at the limit (accepted) and the cases one step past it (refused, with the check's words)."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from contract import BF16, limits
from contract.op import Bound

from .builders import reserved_zeros
from .core import Cases, TooLarge, at_index, set_arg


def _first(rank: int) -> tuple:
    return (0,) * rank


def _row(rank: int, k: int) -> tuple:
    """Index of element k of the first row along the last axis."""
    return (0,) * (rank - 1) + (k,)


def _rank(g: Cases, b: Bound) -> int:
    return len(g.c.arg(b.arg).shape)


def _base_dims(g: Cases) -> tuple[dict, dict]:
    """The builder's default case and the dims the contract binds for it (the default case must be valid)."""
    base = g.build({})
    return base, g.c.validate_host(
        **{k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in base.items()}
    ).dims


def _edge_no_nan(g: Cases, b: Bound) -> None:
    i = _row(_rank(g, b), -1)  # the last of a row: -inf there keeps the row non-increasing
    g.accepted(b.name, "minus_inf", {}, b.clause, edit=at_index(b.arg, i, -np.inf))
    g.refused(b.name, "nan", b.arg, "NaN", b.clause, at_index(b.arg, i, np.nan))


def _edge_no_plus_inf(g: Cases, b: Bound) -> None:
    """The dtype's largest finite value at the first element (accepted), +inf there (refused), per dtype."""
    i = _first(_rank(g, b))
    dtypes = [np.dtype(d) if d != "bfloat16" else BF16 for d in g.c.arg(b.arg).dtypes]
    for dt in dtypes:
        p = {"dtype": dt} if len(dtypes) > 1 else {}
        big = dt.type(np.finfo(dt).max) if dt != BF16 else dt.type(float(ml_dtypes.finfo(BF16).max))
        g.accepted(b.name, f"largest_finite.{dt}", p, b.clause, edit=at_index(b.arg, i, big))
        g.refused(b.name, f"plus_inf.{dt}", b.arg, r"\+inf", b.clause, at_index(b.arg, i, np.inf), params=p)


def _edge_at_most_dim(g: Cases, b: Bound) -> None:
    """An int argument bounded by a shape symbol: equal to it (accepted), one more (refused), at the symbol's
    lowest value and at a middle one."""
    assert b.dim is not None, f"{b.name}: at_most_dim needs the symbol (dim)"
    lo = g.c.symbol(b.dim).lo
    for n in sorted({lo, max(lo, 8)}):
        g.accepted(b.name, f"equal_{b.dim}{n}", {b.dim: n, b.arg: n}, b.clause)
        g.refused(
            b.name,
            f"{b.dim}{n}_plus_1",
            b.arg,
            rf"{n + 1} > {b.dim}={n}\b",
            b.clause,
            set_arg(b.arg, n + 1),
            params={b.dim: n, b.arg: n},
        )


def _edge_at_most(g: Cases, b: Bound) -> None:
    base, _ = _base_dims(g)
    dt = np.asarray(base[b.arg]).dtype
    i = _first(_rank(g, b))  # the first of a row is its largest
    g.accepted(b.name, "at", {}, b.clause, edit=at_index(b.arg, i, b.value))
    if np.issubdtype(dt, np.integer):
        if b.value < np.iinfo(dt).max:  # else the dtype keeps the limit: nothing past it can be passed
            g.refused(b.name, "past", b.arg, rf"> {b.value}", b.clause, at_index(b.arg, i, b.value + 1))
    else:
        past = np.nextafter(dt.type(b.value), dt.type(np.inf))
        g.refused(b.name, "past", b.arg, rf"> {b.value:g}", b.clause, at_index(b.arg, i, past))


def _owned(g: Cases, b: Bound) -> bool:
    """Whether the builder derives other arguments from this one (prefix_lens: the pages): then edges go
    through the builder's parameter instead of editing the argument."""
    return b.arg in g.build.params


def _edge_at_least(g: Cases, b: Bound) -> None:
    base, _ = _base_dims(g)
    i = _first(_rank(g, b))
    words = "negative" if b.value == 0 else rf"(below|less than|<) {b.value}"
    if _owned(g, b):
        at = np.asarray(base[b.arg]).copy()
        at[i] = b.value
        g.accepted(b.name, "at", {b.arg: at.tolist()}, b.clause)
    else:
        g.accepted(b.name, "at", {}, b.clause, edit=at_index(b.arg, i, b.value))
    g.refused(b.name, "past", b.arg, words, b.clause, at_index(b.arg, i, b.value - 1))


def _edge_non_increasing(g: Cases, b: Bound) -> None:
    r = _rank(g, b)

    def tie(args):
        a = np.array(args[b.arg])
        a[_row(r, 1)] = a[_row(r, 0)]
        args[b.arg] = a

    def up(args):
        a = np.array(args[b.arg])
        a[_row(r, 1)] = np.nextafter(a[_row(r, 0)], a.dtype.type(np.inf))
        args[b.arg] = a

    g.accepted(b.name, "tie", {}, b.clause, edit=tie)
    g.refused(b.name, "one_ulp_up", b.arg, "non-increasing", b.clause, up)


def _edge_distinct(g: Cases, b: Bound) -> None:
    r = _rank(g, b)

    def neighbour(delta):
        def edit(args):
            a = np.array(args[b.arg])
            a[_row(r, 1)] = a[_row(r, 0)] + delta
            args[b.arg] = a

        return edit

    g.accepted(b.name, "differ_by_1", {}, b.clause, edit=neighbour(1))
    g.refused(b.name, "equal", b.arg, "duplicate", b.clause, neighbour(0))


def _edge_context(g: Cases, b: Bound) -> None:
    base, dims = _base_dims(g)
    prefix = np.asarray(base[b.arg]).tolist()
    for edge, extra in (("at", 0), ("past", 1)):
        p = {b.arg: [limits.MAX_CONTEXT - dims[b.rows] + extra] + prefix[1:]}
        if extra:
            g.refused(b.name, edge, b.arg, "exceeds the context limit", b.clause, lambda a: a, params=p)
        else:
            g.accepted(b.name, edge, p, b.clause)


def _edge_full_mask_bytes(g: Cases, b: Bound) -> None:
    """D·(Σ prefix + bs·D) bytes: 8 requests of the largest tree, prefixes summing to the largest total that
    fits (one more row per request would not), and one row more."""
    bs, B = 8, limits.MAX_BUDGET
    D = 1 + B
    total = limits.MAX_FULL_MASK_BYTES // D - bs * D  # Σ prefix at the limit
    each = limits.MAX_CONTEXT - D
    prefix = [each] * (bs - 1) + [total - each * (bs - 1)]
    assert 0 <= prefix[-1] <= each and D * (total + 1 + bs * D) > limits.MAX_FULL_MASK_BYTES
    p = {"bs": bs, "budget": B, b.arg: True}
    g.accepted(b.name, "at", {**p, "prefix_lens": prefix}, b.clause)
    g.refused(
        b.name,
        "past",
        b.arg,
        "FULL_MASK layout would take",
        b.clause,
        lambda a: a,
        params={**p, "prefix_lens": prefix[:-1] + [prefix[-1] + 1]},
    )


def _edge_cache_rows(g: Cases, b: Bound) -> None:
    """num_pages · page_size = MAX_CACHE_ROWS (2^31 - 1, a prime: page_size 1) cannot be held anywhere; one
    row past it (2^21 pages of 1024 rows) is refused by shape, with a cache of reserved address space."""
    rows = limits.MAX_CACHE_ROWS

    def too_large():
        raise TooLarge(f"a cache of {rows} rows takes {rows * 576 * 2 / 1e12:.1f} TB in bf16: no machine holds it")

    g.add(b.name, "at", too_large, clause=b.clause)

    def past(args):
        args[b.arg] = reserved_zeros((2**21, 1024, 576), np.asarray(args[b.arg]).dtype)
        return args

    g.refused(b.name, "past", b.arg, rf"rows exceed {rows}", b.clause, past, in_file=False)


def _needs(args, rows: int) -> list[int]:
    ps = np.asarray(args["kv_cache"]).shape[1]
    return [(int(p) + rows + ps - 1) // ps for p in np.asarray(args["prefix_lens"])]


def _edge_pages_needed(g: Cases, b: Bound) -> None:
    _, dims = _base_dims(g)

    def width(less):
        def edit(args):
            args[b.arg] = np.array(args[b.arg][:, : max(_needs(args, dims[b.rows])) - less])

        return edit

    g.accepted(b.name, "width_at_need", {}, b.clause, edit=width(0))
    g.refused(b.name, "width_need_minus_1", b.arg, r"needs \d+ pages", b.clause, width(1))


def _edge_page_index(g: Cases, b: Bound) -> None:
    _, dims = _base_dims(g)
    rows = dims[b.rows]

    def last_page(args):  # request 0's first page moved to the last (spare) page, its rows copied along
        kv, bt = np.array(args["kv_cache"]), np.array(args[b.arg])
        kv[-1] = kv[bt[0, 0]]
        bt[0, 0] = kv.shape[0] - 1
        args["kv_cache"], args[b.arg] = kv, bt

    def garbage_past_need(args):  # entries no request needs are never read
        bt = np.array(args[b.arg])
        for r, n in enumerate(_needs(args, rows)):
            bt[r, n:] = [np.asarray(args["kv_cache"]).shape[0], -1, 2**31 - 1][: bt.shape[1] - n] + [-7] * max(
                0, bt.shape[1] - n - 3
            )
        args[b.arg] = bt

    g.accepted(b.name, "last_page", {}, b.clause, edit=last_page)
    g.accepted(b.name, "garbage_past_need", {}, b.clause, edit=garbage_past_need)

    def entry(col, value):
        def edit(args):
            bt = np.array(args[b.arg])
            n = np.asarray(args["kv_cache"]).shape[0]
            bt[0, _needs(args, rows)[0] - 1 if col == "last" else 0] = n if value == "num_pages" else value
            args[b.arg] = bt

        return edit

    for edge, col, value in (
        ("first_entry_num_pages", "first", "num_pages"),
        ("first_entry_minus_1", "first", -1),
        ("last_needed_entry_num_pages", "last", "num_pages"),
    ):
        g.refused(b.name, edge, b.arg, "is not a page index", b.clause, entry(col, value))


def _edge_visibility(g: Cases, b: Bound) -> None:
    _, dims = _base_dims(g)
    Q = dims["Q"]
    for tree, q in (("chain", 33), ("star", 40)):  # the deepest tree over two words, the widest
        g.accepted(b.name, f"{tree}_Q{q}", {"tree": tree, "Q": q}, b.clause)

    def bits(row, col, on):
        def edit(args):
            v = np.array(args[b.arg])
            mask = np.uint32(1 << (col % 32))
            v[0, row, col // 32] = (v[0, row, col // 32] | mask) if on else (v[0, row, col // 32] & ~mask)
            args[b.arg] = v

        return edit

    if Q % 32:
        g.refused(b.name, "bit_Q_set", b.arg, "bits beyond Q", b.clause, bits(0, Q, True))
    g.refused(b.name, "last_row_without_itself", b.arg, "does not see itself", b.clause, bits(Q - 1, Q - 1, False))
    g.refused(b.name, "row_1_without_root", b.arg, "does not see the root", b.clause, bits(1, 0, False))
    g.refused(b.name, "row_1_sees_row_2", b.arg, "sees a later row", b.clause, bits(1, 2, True))
    g.refused(
        b.name,
        "chain_row_3_without_row_1",
        b.arg,
        "not its parent's row plus itself",
        b.clause,
        bits(3, 1, False),
        params={"tree": "chain", "Q": 4},
    )


def _edge_links(g: Cases, b: Bound) -> None:
    _, dims = _base_dims(g)
    D = dims["D"]
    for tree in ("chain", "star"):  # the last index linked as a child, as a sibling
        g.accepted(b.name, f"{tree}_to_the_last_node", {"tree": tree}, b.clause)
    cases = [
        ("root_sibling", "next_sibling", (0, 0), 1, "root of request 0 has a sibling"),
        ("first_child_to_itself", "first_child", (0, 1), 1, "must be -1 or an index"),
        ("first_child_past_the_tree", "first_child", (0, D - 1), D, "must be -1 or an index"),
        ("next_sibling_backwards", "next_sibling", (0, 2), 1, "must be -1 or an index"),
    ]
    for edge, arg, i, v, words in cases:
        g.refused(b.name, edge, arg, words, b.clause, at_index(arg, i, v))

    def two_incoming(args):  # a node already linked as a sibling becomes another node's sibling too
        ns = np.array(args["next_sibling"])
        target = int(np.flatnonzero(ns[0] >= 0)[0])  # u with a sibling s = ns[u]: link s from another node
        s = int(ns[0, target])
        other = next(u for u in range(1, s) if u != target and ns[0, u] == -1)
        ns[0, other] = s
        args["next_sibling"] = ns

    g.refused(
        b.name, "node_with_two_incoming_links", "first_child", "more than one incoming link", b.clause, two_incoming
    )


def _edge_max_depth(g: Cases, b: Bound) -> None:
    depth = 5
    g.accepted(b.name, "deepest_node_at_max_depth", {"max_depth": depth}, b.clause)
    g.refused(
        b.name,
        "deepest_node_one_deeper",
        b.arg,
        rf"depth {depth} > max_depth {depth - 1}",
        b.clause,
        set_arg("max_depth", depth - 1),
        params={"max_depth": depth},
    )


def _edge_writeable(g: Cases, b: Bound) -> None:
    def read_only(args):
        a = np.array(args[b.arg])
        a.setflags(write=False)
        args[b.arg] = a

    def fortran(args):
        args[b.arg] = np.asfortranarray(args[b.arg])

    words = "writeable C-contiguous"
    g.refused(b.name, "read_only", b.arg, words, b.clause, read_only, in_file=False)
    g.refused(b.name, "fortran_order", b.arg, words, b.clause, fortran, in_file=False)


def _edge_distinct_rows(g: Cases, b: Bound) -> None:
    """Two requests on one page: request 1's tree rows right after request 0's (accepted), one row earlier
    (refused); and one request whose two needed pages are the same page."""
    _, dims = _base_dims(g)
    D = dims[b.rows]

    def share(args):
        bt = np.array(args[b.arg])
        bt[1, 0] = bt[0, 0]
        args[b.arg] = bt

    g.accepted(
        b.name, "adjacent_requests_on_one_page", {"page_size": 2 * D, "prefix_lens": [0, D]}, b.clause, edit=share
    )
    g.refused(
        b.name,
        "requests_overlap_by_one_row",
        b.arg,
        "map to the same cache row",
        b.clause,
        share,
        params={"page_size": 2 * D, "prefix_lens": [0, D - 1]},
    )

    def alias_within(args):
        bt = np.array(args[b.arg])
        bt[0, 1] = bt[0, 0]
        args[b.arg] = bt

    g.refused(
        b.name,
        "one_request_twice_on_a_page",
        b.arg,
        "map to the same cache row",
        b.clause,
        alias_within,
        params={"page_size": 2, "prefix_lens": [0, 0]},
    )


EDGES: dict[str, Callable[[Cases, Bound], None]] = {
    "no_nan": _edge_no_nan,
    "no_plus_inf": _edge_no_plus_inf,
    "at_most_dim": _edge_at_most_dim,
    "at_most": _edge_at_most,
    "at_least": _edge_at_least,
    "non_increasing": _edge_non_increasing,
    "distinct": _edge_distinct,
    "context": _edge_context,
    "full_mask_bytes": _edge_full_mask_bytes,
    "cache_rows": _edge_cache_rows,
    "pages_needed": _edge_pages_needed,
    "page_index": _edge_page_index,
    "visibility": _edge_visibility,
    "links": _edge_links,
    "max_depth": _edge_max_depth,
    "writeable": _edge_writeable,
    "distinct_rows": _edge_distinct_rows,
}
