"""Golden fixtures (fixtures/<op>/*.kdtr): every implementation reproduces the committed outputs, and the
fixtures themselves are current (MANIFEST.json: file sha256 and the hash of the generating sources)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import pathlib

import numpy as np
import pytest

import kdtr
from harness import impls
from harness import spec as clauses
from harness.compare import assert_bit_exact, assert_close

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _gen():
    s = importlib.util.spec_from_file_location("gen_fixtures", ROOT / "tools" / "gen_fixtures.py")
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m


def _files(op):
    return sorted((FIXTURES / op).glob("*.kdtr"))


def _call(impl, op, f):
    try:
        fn = impl.op(op)
    except impls.Unavailable as e:
        pytest.skip(str(e))
    t = {k[3:]: f[k] for k in f.infos if k.startswith("in.")}
    if op == "tree_build":
        return fn(t["top_logp"], t["top_ids"], t["root_tokens"], int(t["budget"]), t["prefix_lens"])
    if op == "tree_accept":
        commit = {}
        if "kv_cache" in t:
            commit = {
                "kv_cache": np.array(t["kv_cache"]),
                "block_table": t["block_table"],
                "prefix_lens": t["prefix_lens"],
            }
        return fn(
            t["tokens"],
            t["first_child"],
            t["next_sibling"],
            t["target_tokens"],
            max_depth=int(t["max_depth"]),
            **commit,
        ), commit.get("kv_cache")
    return fn(t["q"], t["kv_cache"], t["block_table"], t["prefix_lens"], t["visibility"], float(t["softmax_scale"]))


@pytest.mark.spec("TB.4.3")
@pytest.mark.parametrize("path", _files("tree_build"), ids=lambda p: p.stem)
def test_tree_build_fixture(impl, path):
    f = kdtr.load(path)
    got = _call(impl, "tree_build", f)
    for name in (k for k in f.infos if k.startswith("out.")):
        assert_bit_exact(
            np.asarray(getattr(got, name[4:])),
            np.asarray(f[name]),
            what=name[4:],
            spec_id="TB.4.3",
            context={"fixture": path.name},
        )


@pytest.mark.spec("TA.4.2")
@pytest.mark.parametrize("path", _files("tree_accept"), ids=lambda p: p.stem)
def test_tree_accept_fixture(impl, path):
    f = kdtr.load(path)
    got, kv = _call(impl, "tree_accept", f)
    for name in (k for k in f.infos if k.startswith("out.")):
        actual = kv if name == "out.kv_cache" else np.asarray(getattr(got, name[4:]))
        assert_bit_exact(actual, np.asarray(f[name]), what=name[4:], spec_id="TA.4.2", context={"fixture": path.name})


@pytest.mark.spec("TV.3.4")
@pytest.mark.parametrize("path", _files("tree_verify"), ids=lambda p: p.stem)
def test_tree_verify_fixture(impl, path):
    f = kdtr.load(path)
    out, lse = _call(impl, "tree_verify", f)
    if impl.name == "reference":  # it generated them: bit for bit
        assert_bit_exact(out, np.asarray(f["out.out"]), what="out", spec_id="TV.3.4")
        assert_bit_exact(lse, np.asarray(f["out.lse"]), what="lse", spec_id="TV.3.4")
        return
    tol = clauses.clause("TV.2.1" if out.dtype == np.float32 else "TV.2.2").tolerance()
    for name, a in (("out", out), ("lse", lse)):
        assert_close(
            a.astype(np.float64), np.asarray(f[f"out.{name}"]).astype(np.float64), what=name, spec_id="TV.3.4", **tol
        )


@pytest.mark.spec("TB.3.2", "TB.3.3", "TA.2.3")
def test_sgl_kernel_golden_values():
    """The adapted sgl-kernel cases carry sgl-kernel's own expected numbers (not only ours)."""
    b = kdtr.load(FIXTURES / "tree_build" / "sgl_golden_request0.kdtr")
    assert b["out.positions"].tolist() == [[5, 6, 6, 7, 7, 8, 8, 9]]
    assert b["out.first_child"].tolist() == [[1, 3, 4, 5, 6, 7, -1, -1]]
    assert b["out.next_sibling"].tolist() == [[-1, 2, -1, -1, -1, -1, -1, -1]]
    a = kdtr.load(FIXTURES / "tree_accept" / "sgl_golden.kdtr")
    assert a["out.accept_len"].tolist() == [3, 2]
    assert a["out.accept_path"].tolist() == [[0, 3, 4, 5], [0, 1, 3, -1]]
    assert a["out.bonus"].tolist() == [18, 18]


@pytest.mark.spec("TB.4.3", "TA.4.2", "TV.3.4")
def test_fixtures_are_current():
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    gen = _gen()
    assert manifest["source_hash"] == gen.source_hash(), (
        "fixture sources changed since the fixtures were made: run `make fixtures` and review the diff"
    )
    on_disk = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.kdtr")}
    assert on_disk == set(manifest["files"]), "fixture files and MANIFEST.json disagree"
    for rel, sha in manifest["files"].items():
        assert hashlib.sha256((FIXTURES / rel).read_bytes()).hexdigest() == sha, f"{rel} does not match MANIFEST.json"
