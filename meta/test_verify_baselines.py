"""The tree_verify benchmark's inputs, FLOP and byte counts, and torch comparators (harness/bench/
verify_baselines.py). The comparators are checked on the CPU against the float64 numpy oracle when torch is
installed (it is on the GPU image, not on the CI box)."""

import ml_dtypes
import numpy as np
import pytest

from harness.bench import verify_baselines as vb
from reference import tree_build
from reference import tree_verify as rv


def test_ddtree_parents_make_a_tree_of_q_nodes():
    for Q in (1, 2, 17, 65, 257):
        par = vb.ddtree_parents(Q)
        assert len(par) == Q and par[0] == -1 and all(0 <= par[i] < i for i in range(1, Q))


def test_useful_flops_counts_prefix_and_visible_tree_rows():
    Q, H, P, bs = 5, 3, 7, 2
    par = np.array([-1, 0, 0, 1, 3], np.int32)
    depths = np.array([0, 1, 1, 2, 3], np.int32)
    vis = tree_build.layouts(par[None], depths[None], np.array([Q], np.int32), np.array([P], np.int32))[0]
    case = vb.Case(np.zeros((bs, Q, H, 576)), None, None, np.full(bs, P, np.int32), np.repeat(vis, bs, 0), 0.1)
    visible = 1 + 2 + 2 + 3 + 4  # each node sees itself and its ancestors
    assert vb.useful_flops(case) == 2 * H * bs * (Q * P + visible) * (576 + 512)


def test_memory_estimates_grow_with_the_problem():
    for name in ("absorb_eager", "sdpa_bool_mask", "cascade", "flex"):
        small = vb.estimate_bytes(name, 1, 16, 64, 1024)
        assert vb.estimate_bytes(name, 8, 16, 64, 1024) > small and vb.estimate_bytes(name, 1, 16, 64, 8192) > small
    # the largest grid cell cannot fit a materialised score matrix in 141 GB
    assert vb.estimate_bytes("absorb_eager", 128, 257, 128, 131072 + 257) > 141e9


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("bs,Q,H,P", [(2, 17, 4, 70), (1, 1, 2, 64), (3, 5, 8, 130), (2, 33, 2, 0)])
def test_comparators_match_the_float64_oracle(dtype, bs, Q, H, P):
    torch = pytest.importorskip("torch", reason="torch not installed: the comparators are torch code")
    tdt = getattr(torch, dtype)
    case = vb.make_case(bs, Q, H, P, device="cpu", dtype=tdt, seed=3)
    rows, mask = vb.row_index(case, "cpu"), vb.dense_mask(case, "cpu")
    npdt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    q = case.q.float().numpy().astype(npdt)
    kv = case.kv.float().numpy().astype(npdt)
    want, _ = rv.tree_verify_float64(q, kv, case.block_table, case.prefix_lens, case.visibility, case.scale)
    want = torch.from_numpy(np.asarray(want, np.float64))
    tol = 1e-5 if dtype == "float32" else 2e-2
    for name in ("absorb_eager", "sdpa_bool_mask", "cascade"):
        got = vb.FUNCTIONS[name](case, rows, mask)
        assert tuple(got.shape) == (bs, Q, H, 512) and got.dtype == tdt, name
        assert vb.rel_err(got.double(), want) < tol, name
    assert vb.spot_check(case, want.to(tdt), rows) < tol
