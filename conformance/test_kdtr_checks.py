"""Every golden KDTR file (kdtr/corpus, made by kdtr/gen_corpus.py) in both readers, with data
verification on and off (FORMAT.md §3).

The corpus has one failing file per code, each check at its limit (just outside: refused with the code;
just inside: accepted, or stopped by a later check with another code) and the edge paths a file per code
leaves unreached (alignments above 64, the first and the last byte of each pad, a rank-0 BOOL tensor). Both
readers must give exactly the same answer for each: code, entry, name and message; with data verification
off the answer is the same except that a data CRC (E33) is no longer checked. kdtr/coverage_gate.py checks
that these files alone take every rejecting branch of both readers.
"""

from __future__ import annotations

import pytest

import kdtr
from harness import tools
from kdtr import gen_corpus
from kdtr.describe import comparable, describe

CORPUS = tools.ROOT / "kdtr" / "corpus"
CASES = gen_corpus.cases()
E = kdtr.Code


@pytest.fixture(scope="module")
def cpp_reader(request):
    return tools.required_binary(request.config, "kdtr-inspect")


@pytest.mark.spec("KDTR.4.3")
@pytest.mark.parametrize("reader", ["cpp"])
@pytest.mark.parametrize("verify", [True, False], ids=["verify", "no-verify"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_corpus_file_in_both_readers(reader, cpp_reader, case, verify):
    _, want = CASES[case]
    path = CORPUS / gen_corpus.path_of(case, want)
    data = path.read_bytes()
    if not verify and want == E.DATA_CRC:
        want = None
    py = describe(data, verify=verify)
    assert (py["code"] if not py["ok"] else None) == (want.tag if want else None), f"{case}: Python reader said {py}"
    assert comparable(tools.inspect(path, verify=verify)) == comparable(py)
    if py["ok"]:
        f = kdtr.loads(data, verify_data=verify)
        assert all(f[n].shape == t.shape for n, t in f.infos.items())  # every accepted tensor is an array


@pytest.mark.spec("KDTR.3.10")
@pytest.mark.parametrize("reader", ["python"])
def test_empty_tensors_with_huge_dims(reader):
    """At the bound an empty tensor is an ordinary (empty) array; one past it, or [2^40, 2^40, 0], is E22."""
    f = kdtr.loads(CASES["empty-at-limit"][0])
    assert f["c"].shape == (0, 2**46) and f["c"].size == 0
    for case in ("empty-over-limit", "empty-huge-dims", "empty-dim-over-2pow48"):
        with pytest.raises(kdtr.KdtrError) as e:
            kdtr.loads(CASES[case][0])
        assert e.value.code == E.SIZE_OVERFLOW, case


@pytest.mark.spec("KDTR.3.1", "KDTR.3.2", "KDTR.3.3", "KDTR.3.4", "KDTR.3.5", "KDTR.3.6", "KDTR.3.7")
def test_corpus_files_are_the_generators():
    """Every committed corpus file is one of the generator's cases (a stray file would be tested by nothing
    that knows its expected code); freshness of their bytes is meta/test_layout.py's."""
    made = {gen_corpus.path_of(c, code) for c, (_, code) in CASES.items()}
    have = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.kdtr")}
    assert have == made, (sorted(have - made), sorted(made - have))
