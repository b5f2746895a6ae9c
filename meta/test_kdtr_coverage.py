"""kdtr/coverage_gate.py's corpus gate (every rejecting statement of a reader check taken by a golden file):
it finds every check of both readers, passes on the committed corpus, and fails naming the check when the
files that reach it are taken away. The C++ half needs clang's coverage build: `make kdtr-coverage` runs it."""

from __future__ import annotations

import shutil

import pytest

import kdtr
from kdtr import coverage_gate as gate

FILE_CODES = {c.name for c in kdtr.Code if c.value < 90}  # the codes a file's content can cause


def test_every_check_of_both_readers_is_a_site():
    """Each FORMAT.md code appears among the rejecting statements the gate watches, in both readers (a
    parser that found nothing would pass any corpus)."""
    py = {code for _, code in gate.python_sites()}
    cpp = {code.removeprefix("kind.") for _, _, code in gate.cpp_sites()}
    # take_name's codes for tensor names and metadata keys alike are the variables `bad` and `dup`
    want = FILE_CODES - {"BAD_NAME", "DUPLICATE_NAME", "BAD_META_KEY", "DUPLICATE_META_KEY"} | {"bad", "dup"}
    assert want <= py, sorted(want - py)
    assert want <= cpp, sorted(want - cpp)


def _missing(sites) -> list[str]:
    return [s for s, taken in sites if not taken and s.split()[-1] not in gate.NO_FILE_CAN]


@pytest.mark.slow
def test_python_half_passes_on_the_corpus_and_names_what_is_taken_away(tmp_path, monkeypatch):
    sites = gate.corpus_python()
    assert len(sites) > 40 and not _missing(sites)
    shutil.copytree(gate.CORPUS, tmp_path / "corpus")
    for p in (tmp_path / "corpus" / "invalid").glob("E12_*"):
        p.unlink()
    monkeypatch.setattr(gate, "CORPUS", tmp_path / "corpus")
    missing = _missing(gate.corpus_python())
    assert len(missing) == 1 and missing[0].endswith(" INDEX_CRC"), missing
