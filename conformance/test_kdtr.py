"""KDTR v1 conformance (spec/kdtr.md), for the Python reader and the C++ reader (kdtr-inspect)."""

from __future__ import annotations

import contextlib
import pathlib
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kdtr
from harness import profiles, tools
from harness import strategies as hh
from kdtr.describe import comparable, describe
from kdtr.testing import fix_crcs

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "kdtr" / "corpus"
READERS = ["python", "cpp"]

# error code -> clause
CLAUSE_OF = {
    **{c: "KDTR.3.1" for c in range(1, 9)},
    **{c: "KDTR.3.2" for c in range(9, 13)},
    **{c: "KDTR.3.3" for c in range(13, 16)},
    **{c: "KDTR.3.4" for c in range(16, 26)},
    **{c: "KDTR.3.5" for c in range(26, 29)},
    **{c: "KDTR.3.6" for c in range(29, 32)},
    32: "KDTR.3.8",
    33: "KDTR.3.7",
    34: "KDTR.3.7",
}


@pytest.fixture(scope="session")
def cpp_reader(request):
    return tools.required_binary(request.config, "kdtr-inspect")


def read(reader: str, path: pathlib.Path, *, verify: bool = True) -> dict:
    if reader == "python":
        return describe(path.read_bytes(), verify=verify)
    return tools.inspect(path, verify=verify)


def _reader(request, reader):
    if reader == "cpp":
        request.getfixturevalue("cpp_reader")
    return reader


# --- KDTR.1 Round trip -------------------------------------------------------------------------------------
@pytest.mark.spec("KDTR.1.1")
@pytest.mark.parametrize("reader", READERS)
@given(content=hh.kdtr_contents())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_round_trip_every_dtype_and_rank(request, reader, tmp_path_factory, content):
    """Any supported arrays with metadata round-trip: names, dtypes, shapes, bytes and metadata."""
    _reader(request, reader)
    tensors, metadata, align_log2 = content
    data = kdtr.dumps(tensors, metadata, align_log2=align_log2)
    if reader == "python":
        f = kdtr.loads(data)
        assert set(f.infos) == set(tensors) and f.metadata == metadata and f.align_log2 == align_log2
        for n, a in tensors.items():
            got = f[n]
            assert got.dtype == a.dtype and got.shape == a.shape, n
            assert got.tobytes() == np.ascontiguousarray(a).tobytes(), n
    else:
        p = tmp_path_factory.mktemp("rt") / "f.kdtr"
        p.write_bytes(data)
        assert comparable(tools.inspect(p)) == comparable(describe(data))


@pytest.mark.spec("KDTR.1.2")
@pytest.mark.parametrize("reader", ["python"])
def test_views_are_read_only_and_zero_copy(reader, tmp_path):
    p = tmp_path / "v.kdtr"
    kdtr.save(p, {"x": np.arange(100, dtype=np.float32)})
    f = kdtr.load(p)
    x = f["x"]
    assert not x.flags.writeable
    with pytest.raises(ValueError):
        x[0] = 1
    assert x.base is not None and not x.flags.owndata  # a view over the mapping, not a copy


# --- KDTR.2 Canonical writer -------------------------------------------------------------------------------
@pytest.mark.spec("KDTR.2.1")
@pytest.mark.parametrize("reader", READERS)
@given(content=hh.kdtr_contents(), seed=st.integers(0, 2**32 - 1))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_canonical_writer_same_bytes(request, reader, tmp_path_factory, content, seed):
    """Insertion order does not matter; the C++ canonical writer re-serializes to the same bytes."""
    _reader(request, reader)
    tensors, metadata, align_log2 = content
    a = kdtr.dumps(tensors, metadata, align_log2=align_log2)
    items = list(tensors.items())
    random.Random(seed).shuffle(items)
    assert kdtr.dumps(dict(items), dict(reversed(list(metadata.items()))), align_log2=align_log2) == a
    if reader == "cpp":
        d = tmp_path_factory.mktemp("canon")
        (d / "in.kdtr").write_bytes(a)
        tools.inspect(d / "in.kdtr", rewrite=d / "out.kdtr")
        assert (d / "out.kdtr").read_bytes() == a


_WRITER = r"""
import sys, numpy as np, kdtr
path, tag = sys.argv[1], 0
big = {k: np.full(1 << 20, i, np.float32) for i, k in enumerate("abcd")}
first = True
while True:
    tag ^= 1
    kdtr.save(path, {**big, "tag": np.array([tag], np.int32)})
    if first:
        print("published", flush=True)
        first = False
"""


@pytest.mark.slow
@pytest.mark.spec("KDTR.2.2", "KDTR.2.4")
@pytest.mark.parametrize("reader", ["python"])
def test_publish_survives_kill_mid_write(reader, tmp_path):
    """SIGKILL a writer that keeps republishing a 16 MiB file: the path always holds a whole valid file."""
    path = tmp_path / "pub.kdtr"
    kdtr.save(path, {"tag": np.array([7], np.int32)})
    rng = random.Random(1234)
    seen = set()
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "published"
        time.sleep(rng.uniform(0.0, 0.4))  # then kill it somewhere inside a later save
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        f = kdtr.load(path)  # verifies every CRC
        seen.add(int(f["tag"][0]))
    assert seen <= {0, 1, 7}
    assert seen <= {0, 1}, "a published file was lost"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "pub.kdtr"]
    assert all(n.startswith(".kdtr-") for n in leftovers)  # only the killed temp files, never the target
    kdtr.save(path, {"tag": np.array([9], np.int32)})  # the next publish removes the dead writers' temps
    assert [p.name for p in tmp_path.iterdir()] == ["pub.kdtr"]


@pytest.mark.spec("KDTR.2.2")
@pytest.mark.parametrize("reader", ["python"])
def test_publish_failure_keeps_old_file(reader, tmp_path):
    path = tmp_path / "pub.kdtr"
    kdtr.save(path, {"x": np.array([1.0])})
    old = path.read_bytes()

    def crash(tmp):
        raise OSError("simulated crash before rename")

    with pytest.raises(kdtr.KdtrError, match="simulated crash") as e:
        kdtr.save(path, {"x": np.array([2.0])}, _before_publish=crash)
    assert e.value.code == kdtr.Code.IO and isinstance(e.value.__cause__, OSError)
    assert path.read_bytes() == old
    assert [p.name for p in tmp_path.iterdir()] == ["pub.kdtr"]


# --- KDTR.3 Reader validation ------------------------------------------------------------------------------
def _golden_params():
    out = []
    for p in sorted((CORPUS / "invalid").glob("E*.kdtr")):
        code = int(p.name[1:3])
        for r in READERS:
            out.append(pytest.param(p, code, r, id=f"{p.stem}-{r}", marks=pytest.mark.spec(CLAUSE_OF[code])))
    return out


@pytest.mark.parametrize("path,code,reader", _golden_params())
def test_golden_invalid_file_rejected_with_its_code(request, path, code, reader):
    _reader(request, reader)
    got = read(reader, path)
    assert not got["ok"], f"{path.name} was accepted by the {reader} reader"
    assert got["code"] == f"E{code:02d}", f"{path.name}: {reader} reader said {got['code']}"


@pytest.mark.spec("KDTR.3.1", "KDTR.3.2", "KDTR.3.3", "KDTR.3.4", "KDTR.3.5", "KDTR.3.6", "KDTR.3.7")
def test_every_error_code_has_a_golden_file():
    have = {int(p.name[1:3]) for p in (CORPUS / "invalid").glob("E*.kdtr")}
    want = {c.value for c in kdtr.Code if c.value < 90} - {kdtr.Code.HOST_LIMIT.value}
    assert want <= have, f"no golden file for {sorted(want - have)}"


@pytest.mark.spec("KDTR.3.7")
@pytest.mark.parametrize("reader", READERS)
def test_data_crc_is_skipped_only_when_asked(request, reader):
    _reader(request, reader)
    p = CORPUS / "invalid" / "E33_data_crc.kdtr"
    assert read(reader, p, verify=False)["ok"]


@pytest.mark.spec("KDTR.3.4")
@pytest.mark.parametrize("reader", ["python"])
def test_missing_tensor_name_is_not_found(reader):
    f = kdtr.load(CORPUS / "valid" / "base.kdtr")
    with pytest.raises(kdtr.KdtrError) as e:
        f["nope"]
    assert e.value.code == kdtr.Code.NOT_FOUND and "nope" in str(e.value)
    assert "a" in f and "nope" not in f and f.infos["a"].dtype_name == "F32"


@pytest.mark.spec("KDTR.3.7")
@pytest.mark.parametrize("reader", ["python"])
def test_bool_check_is_skipped_only_when_asked(reader):
    p = CORPUS / "invalid" / "E34_bad_bool.kdtr"
    assert kdtr.load(p, check_bool=False)["b"].dtype == np.bool_
    with pytest.raises(kdtr.KdtrError):
        kdtr.load(p)


# --- KDTR.4 Robustness -------------------------------------------------------------------------------------
@pytest.mark.spec("KDTR.4.1")
@pytest.mark.parametrize("reader", ["python"])
@given(data=st.binary(max_size=600))
def test_totality_on_arbitrary_bytes(reader, data):
    with contextlib.suppress(kdtr.KdtrError):
        kdtr.loads(data)


FIELD_VALUES = [0, 1, 63, 64, 65, 2**31, 2**32, 2**48, 2**63, 2**64 - 1]


@st.composite
def mutated_files(draw):
    """A valid file with bit flips, truncation/insertion or a boundary value in a field; CRCs fixed."""
    tensors, metadata, align_log2 = draw(hh.kdtr_contents())
    buf = bytearray(kdtr.dumps(tensors, metadata, align_log2=align_log2))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "field", "truncate", "insert"]))
        if kind == "flip":
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "field":
            size = draw(st.sampled_from([1, 2, 4, 8]))
            i = draw(st.integers(0, len(buf) - size))
            v = draw(st.sampled_from(FIELD_VALUES)) + draw(st.sampled_from([-1, 0, 1]))
            buf[i : i + size] = (v % (1 << (8 * size))).to_bytes(size, "little")
        elif kind == "truncate":
            del buf[draw(st.integers(0, len(buf) - 1)) :]
        else:
            i = draw(st.integers(0, len(buf)))
            buf[i:i] = bytes(draw(st.integers(1, 64)))
        if len(buf) < 8:
            break
    if draw(st.booleans()) and len(buf) >= 64:
        fix_crcs(buf)
    return bytes(buf)


@pytest.mark.spec("KDTR.4.1", "KDTR.4.2")
@pytest.mark.parametrize("reader", ["python"])
@given(data=mutated_files())
def test_mutated_files_rejected_cleanly_or_valid(reader, data):
    try:
        f = kdtr.loads(data)
    except kdtr.KdtrError:
        return
    names = list(f.infos)
    assert names == sorted(names, key=str.encode) and len(set(names)) == len(names)
    A = 1 << f.align_log2
    for t in f.infos.values():
        assert t.offset + t.nbytes <= len(data) and (t.nbytes == 0 or t.offset % A == 0)
        assert f[t.name].nbytes == t.nbytes
    assert kdtr.loads(kdtr.dumps(f.tensors(), f.metadata, align_log2=f.align_log2)).metadata == f.metadata


@pytest.mark.spec("KDTR.4.3")
@pytest.mark.parametrize("reader", ["cpp"])
def test_readers_agree_on_corpus(request, reader):
    _reader(request, reader)
    files = sorted(CORPUS.rglob("*.kdtr"))
    assert len(files) >= 30
    for p in files:
        assert comparable(tools.inspect(p)) == comparable(describe(p.read_bytes())), p.name


@pytest.mark.spec("KDTR.4.3")
@pytest.mark.parametrize("reader", ["cpp"])
@given(data=mutated_files())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_readers_agree_on_mutated_files(request, reader, tmp_path_factory, data):
    _reader(request, reader)
    p = tmp_path_factory.mktemp("diff") / "m.kdtr"
    p.write_bytes(data)
    assert comparable(tools.inspect(p)) == comparable(describe(data))


def _fuzz(request, cmd: list[str], tmp_path, cwd=None) -> None:
    """Run a libFuzzer-style target for profiles.fuzz_seconds() (60 s; quick: 10) seeded with the corpus, from `cwd`
    (default tmp_path); any crash, abort or escaped exception fails, and the run's stats go into the report."""
    seconds = profiles.fuzz_seconds()
    seeds = tmp_path / "corpus"
    seeds.mkdir()
    for p in CORPUS.rglob("*.kdtr"):
        (seeds / p.name).write_bytes(p.read_bytes())
    flags = [
        str(seeds),
        f"-max_total_time={seconds}",
        f"-dict={ROOT / 'kdtr' / 'tools' / 'kdtr.dict'}",
        "-max_len=4096",
        f"-artifact_prefix={tmp_path}/",
        "-print_final_stats=1",
        *tools.fuzz_memory_flags(),
    ]
    out = subprocess.run(cmd + flags, capture_output=True, text=True, timeout=seconds + 120, cwd=cwd or tmp_path)
    stats = [
        ln for ln in out.stderr.splitlines() if ln.startswith(("stat::number_of_executed_units", "stat::peak_rss"))
    ]
    request.node.user_properties.append(("fuzz", {"seconds": seconds, "stats": stats}))
    print("\n".join(stats))
    assert out.returncode == 0, out.stderr[-4000:]
    assert stats, "the fuzzer printed no stats: it did not run"


@pytest.mark.slow
@pytest.mark.spec("KDTR.4.1", "KDTR.4.2")
@pytest.mark.parametrize("reader", ["cpp"])
def test_libfuzzer_smoke(request, reader, tmp_path):
    """libFuzzer + ASan/UBSan over the C++ reader with every check on (CRCs fixed up by the target's
    mutator) and the canonical round-trip check compiled in."""
    fuzz = tools.required_binary(request.config, "kdtr-fuzz")
    _fuzz(request, [str(fuzz), "-use_value_profile=1"], tmp_path)


@pytest.mark.slow
@pytest.mark.spec("KDTR.4.1", "KDTR.4.2")
@pytest.mark.parametrize("reader", ["python"])
def test_atheris_smoke(request, reader, tmp_path):
    """atheris over the Python reader (kdtr/fuzz.py), the same properties as the C++ target."""
    try:
        import atheris  # noqa: F401
    except ImportError as e:
        tools.missing(request.config, f"atheris: {e}")
    # run as a module from the repository root, as `make` and the GPU job run it: the package need not be installed
    _fuzz(request, [sys.executable, "-m", "kdtr.fuzz"], tmp_path, cwd=ROOT)
