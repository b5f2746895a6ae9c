"""lab/tree_build_identity.py's parts that run without a GPU: its arguments, its input set (valid under the contract,
deterministic, reaching the limits and the ties), its byte comparison, and that a planted difference is reported
and fails the run (the two sides' runs stood in for)."""

from __future__ import annotations

import numpy as np
import pytest

from contract import TREE_BUILD
from lab import tree_build_identity as ti


def test_before_is_required_and_must_resolve(capsys):
    assert ti.main([], gpu_ok=lambda: (True, "")) == 2
    assert "--before REV is required" in capsys.readouterr().err
    assert ti.main(["--before", "no-such-revision-anywhere"], gpu_ok=lambda: (True, "")) == 2
    assert "no such revision" in capsys.readouterr().err
    assert ti.main(["--before", "HEAD", "--seeds", "0"], gpu_ok=lambda: (True, "")) == 2
    assert "at least one" in capsys.readouterr().err


def test_no_gpu_is_an_error_not_a_pass(capsys):
    assert ti.main(["--before", "HEAD"], gpu_ok=lambda: (False, "no driver")) == 2
    assert "no GPU: no driver" in capsys.readouterr().err


def test_inputs_are_valid_deterministic_and_reach_the_limits():
    cs = ti.cases(40)
    assert [c["name"] for c in cs] == [c["name"] for c in ti.cases(40)]
    assert all(np.array_equal(a["args"]["top_logp"], b["args"]["top_logp"], equal_nan=True)
               for a, b in zip(cs, ti.cases(40)))  # fmt: skip
    for c in cs:
        TREE_BUILD.validate(**c["args"])  # raises on anything the contract refuses
    dims = [(c["args"]["budget"], c["args"]["top_logp"].shape) for c in cs]
    assert max(B for B, _ in dims) == ti.MAX_BUDGET and max(s[1] for _, s in dims) == ti.MAX_DEPTH
    assert max(s[2] for _, s in dims) == ti.MAX_TOPK and min(B for B, _ in dims) == 0
    assert max(s[0] for _, s in dims) > 264  # wider than a wave of races on a 132-SM GPU: select_race hands off
    ties = [c for c in cs if "-ties-" in c["name"]]
    assert ties and all(len(np.unique(c["args"]["top_logp"])) <= 4 for c in ties)
    lp = np.concatenate([c["args"]["top_logp"].ravel() for c in cs])
    assert np.isneginf(lp).any() and (np.signbit(lp) & (lp == 0)).any()  # -inf and -0.0 entries
    assert any(c["args"]["with_full_mask"] for c in cs)


def test_compare_finds_nothing_in_equal_runs():
    a = {"v|c|k|scores": np.array([0.0, -1.5, -np.inf]), "v|c|k|parents": np.array([-1, 0, 0], np.int32)}
    assert ti.compare(a, {k: v.copy() for k, v in a.items()}) == []


def test_compare_reports_every_kind_of_difference():
    a = {"v|c|k|scores": np.array([0.0, -1.5, -2.0]), "v|c|k|parents": np.array([-1, 0, 0], np.int32),
         "v|c|k|ranks": np.zeros(3, np.int32), "v|c|k|gone": np.zeros(1)}  # fmt: skip
    b = {"v|c|k|scores": np.array([-0.0, -1.5, -2.0]), "v|c|k|parents": np.array([-1, 0, 1], np.int32),
         "v|c|k|ranks": np.zeros(3, np.int64), "v|c|k|new": np.zeros(1)}  # fmt: skip
    d = ti.compare(a, b)
    assert "v|c|k|new: only after" in d and "v|c|k|gone: only before" in d
    assert any(x.startswith("v|c|k|scores: 1 of 3") and "[0] 0.0 -> -0.0" in x for x in d)  # bits, not values
    assert any(x.startswith("v|c|k|parents: 1 of 3") and "[2] 0 -> 1" in x for x in d)
    assert any(x.startswith("v|c|k|ranks: int32[3] before, int64[3] after") for x in d)


def test_a_planted_difference_fails_the_run(capsys, tmp_path):
    """Both sides stood in for: equal outputs pass (exit 0), one changed element fails (exit 1) and is named."""
    base = {"select_race|s0|race_min_b=1|parents": np.arange(8, dtype=np.int32) - 1}
    seen = []

    def same(tree, seeds, variants, out):
        seen.append((tree, (tree / "kernels_cu" / "tree_build.cu").is_file()))
        return {k: v.copy() for k, v in base.items()}

    assert (
        ti.main(["--before", "HEAD", "--json", str(tmp_path / "r.json")], runner=same, gpu_ok=lambda: (True, "")) == 0
    )
    assert "all identical" in capsys.readouterr().out
    assert seen[0][0] != ti.ROOT and seen[0][1] and seen[1][0] == ti.ROOT  # REV's exported tree, then this one

    def planted(tree, seeds, variants, out):
        got = {k: v.copy() for k, v in base.items()}
        if tree == ti.ROOT:
            got["select_race|s0|race_min_b=1|parents"][5] = 2
        return got

    assert ti.main(["--before", "HEAD"], runner=planted, gpu_ok=lambda: (True, "")) == 1
    out = capsys.readouterr().out
    assert "1 differ" in out and "select_race|s0|race_min_b=1|parents: 1 of 8 elements differ: [5] 4 -> 2" in out


@pytest.mark.parametrize("seeds", [1, 11])
def test_the_worker_command_names_the_side(seeds, tmp_path, monkeypatch):
    """A side runs this script as a worker with its own tree first on the path, in its own directory."""
    calls = []

    class Done:
        returncode, stdout, stderr = 0, "", ""

    def fake_run(cmd, cwd, env, capture_output, text):
        calls.append((cmd, cwd, env["PYTHONPATH"]))
        np.savez(cmd[cmd.index("--worker") + 1], x=np.zeros(1))
        return Done()

    monkeypatch.setattr(ti.subprocess, "run", fake_run)
    got = ti.run_side(tmp_path, seeds, ["heap_smem"], tmp_path / "o.npz")
    cmd, cwd, path = calls[0]
    assert list(got) == ["x"] and cwd == tmp_path and path.split(":")[0] == str(tmp_path)
    assert cmd[cmd.index("--seeds") + 1] == str(seeds) and cmd[cmd.index("--variants") + 1] == "heap_smem"
