"""kdtree-engine's op-file reader in bounded memory (spec/engine.md EN.2.5): `op`, `batch` and `serve` check
an op file as kdtr-inspect does and then read only the tensors the op takes, so a huge file whose huge
tensor is refused costs the index, and a valid one the tensors used, never the whole file on top."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import kdtr
from harness import tools
from kdtr import testing
from reference import tree_verify as ref_verify

GiB, MiB = 1 << 30, 1 << 20
# The engine's own footprint (binary, libraries, the index, a 1 MiB CRC buffer) with room: measured ~5 MiB.
BASE_RSS = 32 * MiB


@pytest.fixture(scope="module")
def exe(request):
    return tools.required_binary(request.config, "kdtree-engine")


def _sparse(path, tensors, zeros, op):
    testing.sparse_file(path, tensors, zeros, {"op": op})
    if not testing.is_sparse(path):
        pytest.skip(f"{path.parent} does not keep holes: the test file would take its full size on disk")


def _verify_inputs():
    """A one-request tree_verify op file's small tensors (the cache is added by each test)."""
    return {
        "q": np.linspace(-1, 1, 2 * 576, dtype=np.float32).reshape(1, 1, 2, 576),
        "block_table": np.array([[3, 1]], np.int32),
        "prefix_lens": np.array([5], np.int32),
        "visibility": np.ones((1, 1, 1), np.uint32),
        "softmax_scale": np.array(0.125),
    }


# (id, subcommand, op, small tensors, the huge zero tensor's name and shape and dtype, the engine's message)
REFUSED = [
    (
        "op tree_verify: block_table's dtype, behind a 6 GiB cache",
        "op",
        "tree_verify",
        {**_verify_inputs(), "block_table": np.array([[3, 1]], np.float64)},
        ("kv_cache", (6 * GiB // (64 * 2304), 64, 576), np.float32),
        "block_table: dtype float64, expected int32",
    ),
    (
        "batch tree_build: an unknown 2 GiB tensor",
        "batch",
        "tree_build",
        {
            "top_logp": np.log(np.array([[[0.5, 0.25]]], np.float32)),
            "top_ids": np.array([[[4, 9]]], np.int32),
            "root_tokens": np.array([7], np.int32),
            "budget": np.array(2, np.int32),
            "prefix_lens": np.array([0], np.int32),
        },
        ("zz_extra", (2 * GiB,), np.uint8),
        "zz_extra: is not an input of tree_build",
    ),
]


@pytest.mark.slow
@pytest.mark.spec("EN.2.5")
# the 6 GiB file streams 6 GiB through the CRC (~20 s): a `full` case; the 2 GiB one runs in every profile
@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c[0], marks=[pytest.mark.full] if "6 GiB" in c[0] else []) for c in REFUSED]
)
def test_huge_op_file_refused_under_a_1gib_address_space(exe, case, tmp_path):
    """The file is larger than the engine's whole address space: it is checked (every data CRC, streamed)
    and refused with the contract's message, the refused tensor never read; peak RSS is the engine's own."""
    _, sub, op, small, (name, shape, dtype), message = case
    src, dst = tmp_path / "in.kdtr", tmp_path / "out.kdtr"
    _sparse(src, small, {name: (shape, dtype)}, op)
    if sub == "op":
        cmd = [exe, "op", op, "--in", src, "--out", dst]
    else:
        (tmp_path / "list").write_text(f"{op}\t{src}\t{dst}\n")
        cmd = [exe, "batch", tmp_path / "list"]
    try:
        out, rss = tools.run_measured(cmd, address_space=GiB, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kdtree-engine {sub} did not answer within 300 s")
    answer = out.stderr if sub == "op" else out.stdout
    assert out.returncode == 1 and message in answer, (out.returncode, out.stdout, out.stderr)
    assert "E91" not in answer and not dst.exists()
    assert rss < BASE_RSS, f"peak RSS {rss / MiB:.0f} MiB answering a {src.stat().st_size / GiB:.1f} GiB file"


@pytest.mark.slow
@pytest.mark.spec("EN.2.5")
def test_valid_op_file_holds_the_tensors_it_uses_once(exe, tmp_path):
    """A valid tree_verify file with a 512 MiB cache: the engine holds that cache once (the op copies it), not
    the file besides; the result is the reference's on the same values."""
    pages = 512 * MiB // (64 * 2304)
    src, dst = tmp_path / "in.kdtr", tmp_path / "out.kdtr"
    _sparse(src, _verify_inputs(), {"kv_cache": ((pages, 64, 576), np.float32)}, "tree_verify")
    out, rss = tools.run_measured([exe, "op", "tree_verify", "--in", src, "--out", dst], timeout=300)
    assert out.returncode == 0, out.stderr
    kv_bytes = pages * 64 * 2304
    assert kv_bytes < rss < kv_bytes + BASE_RSS, f"peak RSS {rss / MiB:.0f} MiB for a {kv_bytes / MiB:.0f} MiB cache"
    a = _verify_inputs()  # the request reads page 3 alone (prefix 5 + 1 row): zeros, as in a 4-page cache
    want = ref_verify.tree_verify(
        a["q"], np.zeros((4, 64, 576), np.float32), *(a[k] for k in ("block_table", "prefix_lens", "visibility")), 0.125
    )
    got = kdtr.load(dst)
    assert np.array_equal(got["out"], want.out) and np.array_equal(got["lse"], want.lse)
