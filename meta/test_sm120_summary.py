"""tools/sm120_summary.py, the table an sm_120 certification run ends with: it passes a run where every twin's
rows pass, its source's mutants die and its sanitizer runs end rc=0, and fails on any missing or bad piece."""

import json

from kernels_cu import specs
from tools import sm120_summary


def _run(tmp_path, *, fail_row=False, survivor=False, sanitizer_rc=0):
    twins = [s for s in specs.SPECS if s.variant.endswith("_99k")]
    rows = [{"variant": s.variant, "status": "fail" if fail_row and i == 0 else "pass"} for i, s in enumerate(twins)]
    (tmp_path / "conformance.json").write_text(json.dumps({"rows": rows}))
    for sub, prefix in (("mutants", "k_tv_"), ("mutants_tb", "k_tb_")):
        (tmp_path / sub).mkdir()
        m = {f"{prefix}a": {"killed": True}, f"{prefix}b": {"killed": not survivor}}
        (tmp_path / sub / "conformance.json").write_text(json.dumps({"mutants": m}))
    lines = [f"sanitizer_{t}_{n}: rc={sanitizer_rc}, 9 s;" for t in ("memcheck", "racecheck")
             for n in ("portable_99k", "tree_build_99k")]  # fmt: skip
    (tmp_path / "summary.txt").write_text("\n".join(lines) + "\n")
    perf = [{"extra_info": {"op": "tree_verify", "impl": f"cuda:{v}", "shape": {"H": 64}, "time": {"median_us": t}}}
            for v, t in (("portable", 10.0), ("portable_99k", 13.0))]  # fmt: skip
    (tmp_path / "perf-sm120.json").write_text(json.dumps({"benchmarks": perf}))
    return sm120_summary.main(tmp_path)


def test_a_clean_run_passes(tmp_path, capsys):
    assert _run(tmp_path) == 0
    out = capsys.readouterr().out
    assert "| tree_verify:portable_99k | 1 / 0 / 0 | 2 / 2 | 2 / 2 | 1.30x (1) |" in out and "ok: 0 problem" in out


def test_each_bad_piece_fails(tmp_path):
    for i, bad in enumerate(({"fail_row": True}, {"survivor": True}, {"sanitizer_rc": 99})):
        (tmp_path / str(i)).mkdir()
        assert _run(tmp_path / str(i), **bad) == 1, bad
    (tmp_path / "empty").mkdir()
    assert sm120_summary.main(tmp_path / "empty") == 1
