"""Golden fixtures (fixtures/<op>/*.kdtr): every implementation reproduces the committed outputs, and the
fixtures themselves are current (MANIFEST.json: file sha256 and the hash of the generating sources)."""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest

import contract
import kdtr
from harness import gen_fixtures
from harness import spec as clauses
from harness.cases import Case, fixture_args, run
from harness.compare import assert_bit_exact, assert_close

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _files(op):
    return sorted((FIXTURES / op).glob("*.kdtr"))


def fixture_case(f) -> Case:
    """The op call a fixture holds: its `in.*` tensors by the contract's KDTR names."""
    return Case(f.metadata["op"], fixture_args(f))


def expected(f) -> dict[str, np.ndarray]:
    return {k[4:]: np.asarray(f[k]) for k in f.infos if k.startswith("out.")}


@pytest.mark.spec("TB.4.3")
@pytest.mark.parametrize("path", _files("tree_build"), ids=lambda p: p.stem)
def test_tree_build_fixture(impl, path):
    f = kdtr.load(path)
    got = run(impl, fixture_case(f))
    for name, want in expected(f).items():
        assert_bit_exact(
            np.asarray(getattr(got, name)), want, what=name, spec_id="TB.4.3", context={"fixture": path.name}
        )


@pytest.mark.spec("TA.4.2")
@pytest.mark.parametrize("path", _files("tree_accept"), ids=lambda p: p.stem)
def test_tree_accept_fixture(impl, path):
    f = kdtr.load(path)
    case = fixture_case(f)
    got = run(impl, case)
    for name, want in expected(f).items():
        actual = case.args[name] if name in contract.TREE_ACCEPT.in_place else np.asarray(getattr(got, name))
        assert_bit_exact(actual, want, what=name, spec_id="TA.4.2", context={"fixture": path.name})


@pytest.mark.spec("TV.3.4")
@pytest.mark.parametrize("path", _files("tree_verify"), ids=lambda p: p.stem)
def test_tree_verify_fixture(impl, path):
    f = kdtr.load(path)
    got = run(impl, fixture_case(f))
    want = expected(f)
    if impl.name == f.metadata["generator"]:  # the implementation that made them: bit for bit
        assert_bit_exact(got.out, want["out"], what="out", spec_id="TV.3.4")
        assert_bit_exact(got.lse, want["lse"], what="lse", spec_id="TV.3.4")
        return
    fp32 = got.out.dtype == np.float32
    for name, clause in (("out", "TV.2.1" if fp32 else "TV.2.2"), ("lse", "TV.2.3" if fp32 else "TV.2.9")):
        tol = clauses.clause(clause).tolerance()
        actual = np.asarray(getattr(got, name)).astype(np.float64)
        assert_close(actual, want[name].astype(np.float64), what=name, spec_id="TV.3.4", **tol)


@pytest.mark.spec("DT.4.3")
@pytest.mark.parametrize("path", _files("draft_topk"), ids=lambda p: p.stem)
def test_draft_topk_fixture(impl, path):
    from harness import topk

    f = kdtr.load(path)
    case = fixture_case(f)
    got = run(impl, case)
    want = expected(f)
    ctx = {"fixture": path.name}
    assert_bit_exact(got.top_ids, want["top_ids"], what="top_ids", spec_id="DT.4.3", context=ctx)
    if impl.name == f.metadata["generator"]:  # the implementation that made them: bit for bit
        assert_bit_exact(got.top_logp, want["top_logp"], what="top_logp", spec_id="DT.4.3", context=ctx)
    else:
        topk.assert_log_probs(got.top_logp, want["top_logp"].astype(np.float64), case.logits.shape[2], ctx, "DT.4.3")


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


@pytest.mark.spec("TB.4.3", "TA.4.2", "TV.3.4", "DT.4.3")
def test_fixtures_are_current():
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    assert manifest["source_hash"] == gen_fixtures.source_hash(), (
        "fixture sources changed since the fixtures were made: run `make fixtures` and review the diff"
    )
    on_disk = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.kdtr")}
    assert on_disk == set(manifest["files"]), "fixture files and MANIFEST.json disagree"
    for rel, sha in manifest["files"].items():
        assert hashlib.sha256((FIXTURES / rel).read_bytes()).hexdigest() == sha, f"{rel} does not match MANIFEST.json"


_REPRODUCE = """
import numpy as np
import kdtr
from harness.compare import check_bit_exact
from conformance.test_fixtures import expected, fixture_case, _files
from reference.tree_verify import tree_verify
bad = []
for path in _files("tree_verify"):
    f = kdtr.load(path)
    case = fixture_case(f)
    want = expected(f)
    for layout in ("C", "F"):
        args = dict(case.args)
        if layout == "F":
            args["q"], args["kv_cache"] = np.asfortranarray(args["q"]), np.asfortranarray(args["kv_cache"])
        got = tree_verify(**args)
        for name in ("out", "lse"):
            m = check_bit_exact(getattr(got, name), want[name], what=f"{path.name} {name} ({layout}-order)")
            if m is not None:
                bad.append(m.format())
print("\\n".join(bad) if bad else "OK")
"""
MACHINES = {
    "openblas-haswell": {"OPENBLAS_CORETYPE": "Haswell"},
    "openblas-prescott": {"OPENBLAS_CORETYPE": "Prescott"},
    "numpy-simd-restricted": {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"},
}


@pytest.mark.spec("TV.2.2", "TV.3.4")
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_reference_bits_do_not_depend_on_the_machine(machine):
    """The reference reproduces its fixtures bit for bit under other BLAS kernels, restricted numpy SIMD
    dispatch, and Fortran-order inputs (its sums are exactly rounded; its exp/log fixed arithmetic)."""
    import platform
    import subprocess
    import sys

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"the BLAS core types and SIMD features named here are x86-64's ({platform.machine()})")
    env = {**__import__("os").environ, **MACHINES[machine]}
    out = subprocess.run(
        [sys.executable, "-c", _REPRODUCE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )  # from the repository root, which `python -c` puts first on sys.path
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "OK", f"[TV.2.2] reference bits moved on {machine}:\n{out.stdout[-3000:]}"
