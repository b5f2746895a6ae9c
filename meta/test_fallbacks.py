"""The fallback rate of tree_build's select variants, as the benchmark measures it: the reporting build and the
counting of its n_nodes codes (kernels_cu/tree_build_ops.py, shared with lab/tree_build_dev.py), when a launch
selects at all, the adversarial input family (harness/bench/fallbacks.py), and the planted build that always falls
back (harness/kernel_mutants.py's slow_tb_always_fallback) reaching the reporting builds. The GPU half: the planted
build replays every request where the registered one replays none."""

import numpy as np
import pytest

from contract import TREE_BUILD
from harness import kernel_mutants
from harness.bench import fallbacks, record, targets
from kernels_cu import runtime, specs, tree_build_ops
from reference import tree_build as ref

SELECT = [v for v in targets.variants("tree_build") if targets.selects("tree_build", v)]
H200 = {"sm_count": 132, "block_limit": 227 * 1024}  # the H200's SMs and per-block shared memory (opt-in)


def _bench_inputs(bs, B):
    from perf import bench_tree_build  # here: importing the benchmark module is for the tests that need its inputs

    return bench_tree_build.inputs(bs, B)


def test_the_select_variants_are_the_ones_with_a_selection():
    assert set(SELECT) == {"select_verify", "select_warp", "select_race", "select_verify_99k", "select_warp_99k",
                           "select_race_99k"}  # fmt: skip
    assert not targets.selects("tree_build", "lane_cached") and not targets.selects("tree_accept", "pointer_jump")


def test_reporting_spec_adds_the_define_and_keeps_everything_else():
    spec = specs.get("tree_build", "select_race_99k")
    rep = tree_build_ops.reporting_spec(spec)
    assert rep.variant == "select_race_99k_report" and rep.all_defines() == {**spec.all_defines(),
                                                                             "TB_FALLBACK": "2"}  # fmt: skip
    assert (rep.source, rep.entry, rep.block, rep.options, rep.archs) == (
        spec.source, spec.entry, spec.block, spec.options, spec.archs)  # fmt: skip
    with pytest.raises(ValueError, match="no selection"):
        tree_build_ops.reporting_spec(specs.get("tree_build", "lane_cached"))


def test_counting_the_codes():
    assert tree_build_ops.count_fallbacks(np.array([17, -1, -2, -2, 65, 1], np.int32)) == {
        "requests": 6, "checks_failed": 1, "overflowed": 2}  # fmt: skip


@pytest.mark.parametrize(
    "variant, bs, B, why",
    [
        ("select_warp", 1, 64, None),
        ("select_verify", 1024, 1024, None),
        ("select_race", 16, 256, None),
        ("select_race", 1, 64, "lane_cached's build"),  # below the budget it races from
        ("select_race", 256, 256, "lane_cached's build"),  # beyond a wave of races
        ("select_race", 264, 1024, None),  # two races an SM at B >= 512
        ("select_race_99k", 16, 1024, "select capacity 0"),  # 99 KB at B = 1024, L = 15: no room for candidates
        ("lane_cached", 1, 64, "no selection"),
    ],
)
def test_when_a_launch_selects(variant, bs, B, why):
    got = tree_build_ops.selection_off(specs.get("tree_build", variant), bs, B, 15, B, **H200)
    assert got is None if why is None else why in got, got
    if why is None:  # and the reporting build, which the measurement launches, decides the same
        rep = tree_build_ops.reporting_spec(specs.get("tree_build", variant))
        assert tree_build_ops.selection_off(rep, bs, B, 15, B, **H200) is None


def test_a_design_selecting_from_a_budget_on_says_so():
    spec = specs.get("tree_build", "select_warp").with_defines("from_b128", TB_SELECT_MIN_B="128")
    assert "TB_SELECT_MIN_B" in tree_build_ops.selection_off(spec, 1, 64, 15, 64, **H200)
    assert tree_build_ops.selection_off(spec, 1, 128, 15, 128, **H200) is None


def test_the_adversarial_family_makes_every_path_reach_depth_L():
    """One certain token in every row: valid inputs (rows still sorted), nothing else changed, and in the reference's
    tree every leaf but the one the budget cuts is at depth L (every node's chain of certain tokens follows it)."""
    args = _bench_inputs(4, 16)  # a cell whose rows have no certain token (a quarter of the benchmark's cells do)
    adv = fallbacks.adversarial(args)
    TREE_BUILD.validate(*adv)
    assert (adv[0][..., 0] == 0).all() and (adv[0][..., 1:] == args[0][..., 1:]).all()
    assert all(a is b for a, b in zip(adv[1:], args[1:])) and not (args[0][..., 0] == 0).all()  # the caller's kept
    tree = ref.tree_build(*adv)
    L = args[0].shape[1]
    for r in range(len(tree.n_nodes)):
        n = int(tree.n_nodes[r])
        parents, depths = np.asarray(tree.parents[r][:n]), np.asarray(tree.depths[r][:n])
        leaves = np.setdiff1d(np.arange(n), parents[1:])
        assert (depths[leaves] != L).sum() <= 1, depths[leaves]
    assert fallbacks.family_args("drafter", args) is args
    with pytest.raises(ValueError):
        fallbacks.family_args("peaked", args)


def test_measure_counts_both_families_into_the_record(monkeypatch):
    """What the benchmark stores per select case: one launch per family (the drafter family on the timed arrays
    themselves, the adversarial one on a copy), each turned into a record entry that the schema accepts."""
    args = _bench_inputs(4, 16)
    seen = []

    def launch(op, variant, *call):  # stands for the reporting build: overflows wherever a token is certain
        seen.append(call[0])
        certain = int((call[0][..., 0] == 0).all(axis=-1).sum())
        return {"requests": call[0].shape[0], "checks_failed": 0, "overflowed": certain}

    monkeypatch.setattr(targets, "fallbacks", launch)
    got = fallbacks.measure("select_warp", args)
    assert list(got) == list(fallbacks.FAMILIES) and seen[0] is args[0] and seen[1] is not args[0]
    assert got["drafter"]["rate"] == 0.0 and got["adversarial"] == record.fallback(4, overflowed=4)
    info = record.build(op="tree_build", impl="cuda:select_warp", shape={"bs": 4}, fallback=got,
                        time={"median_us": 1.0, "p10_us": 1.0, "p90_us": 1.0, "rel_spread": 0.0, "n": 1,
                              "where": "device", "method": "x"})  # fmt: skip
    assert record.problems(info) == []


def test_the_planted_build_reaches_every_reporting_build():
    """Under `--kernel-mutant slow_tb_always_fallback` the benchmark measures reporting_spec() of the patched specs:
    the patch survives it for every select variant, sits in the one check the three select builds share, and the
    planted reporting builds compile (so the gate_fallback stage measures the planted build, not the registered one)."""
    mutated = {s.variant: s for s in kernel_mutants.mutated_specs("slow_tb_always_fallback")}
    assert set(SELECT) <= set(mutated)
    for v in SELECT:
        rep = tree_build_ops.reporting_spec(mutated[v])
        assert rep.patches == mutated[v].patches
        _, headers = runtime.source_with_headers(rep)
        select = headers["tree_build_device/select.cuh"]  # select_finish: the three select builds' check
        finish = select[select.index("int select_finish(") :]
        assert "const int status = kUnverified;  // planted" in finish
        assert runtime.compile_kernel(rep, rep.archs[0]).cubin


# --- on a GPU -----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["select_verify", "select_warp", "select_race"])
def test_planted_build_falls_back_in_every_request(variant):
    """bs 16, B 256 (every select variant selects there on an H200): the registered build's reporting build takes
    its selection in every request of the benchmark's rows, the planted one in none."""
    args = _bench_inputs(16, 256)
    if tree_build_ops.selection_off(
        specs.get("tree_build", variant), 16, 256, 15, 256, sm_count=runtime.sm_count(),
        block_limit=runtime.smem_optin_limit(),
    ):  # fmt: skip
        pytest.skip("this GPU runs no selection at bs 16, B 256")
    normal = tree_build_ops.fallbacks(specs.get("tree_build", variant), *args)
    planted = {s.variant: s for s in kernel_mutants.mutated_specs("slow_tb_always_fallback")}[variant]
    got = tree_build_ops.fallbacks(planted, *args)
    assert normal == {"requests": 16, "checks_failed": 0, "overflowed": 0}, normal
    assert got["requests"] == 16 and got["checks_failed"] + got["overflowed"] == 16, got


@pytest.mark.gpu
def test_a_launch_without_selection_reports_none():
    got = tree_build_ops.fallbacks(specs.get("tree_build", "select_race"), *_bench_inputs(1, 64))
    assert got["requests"] == 1 and "lane_cached" in got["no_selection"]
