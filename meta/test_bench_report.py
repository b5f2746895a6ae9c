"""The benchmark report (tools/bench_report.py): Markdown and PNG plots from a synthetic GPU run and from a
real CPU-only run's JSON, with the sections, header facts and plots it promises."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from harness.bench import report, sm120, synthetic
from kernels_cu import specs

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytest.importorskip("matplotlib", reason="the report's plots need matplotlib (pip install -e '.[report]')")


def _report(tmp_path, *runs, plots=True):
    files = []
    for i, data in enumerate(runs):
        f = tmp_path / f"perf-{i}.json"
        f.write_text(json.dumps(data))
        files.append(str(f))
    args = [sys.executable, "-m", "tools.bench_report", *files, "--out", str(tmp_path / "docs")]
    r = subprocess.run(args + ([] if plots else ["--no-plots"]), cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return (tmp_path / "docs" / "BENCHMARKS.md").read_text(), tmp_path / "docs" / "benchmarks"


def test_report_from_a_synthetic_gpu_run(tmp_path):
    md, plots = _report(tmp_path, synthetic.run())
    for needle in ("# Benchmarks", "| device | NVIDIA H200 (sm_90) |", "| driver | 580.159.04", "| NVRTC | 13.0 |",
                   "python -m tools.bench_report perf-0.json", "## Ceilings", "## tree_build", "## tree_accept",
                   "## tree_verify",
                   "## End-to-end analysis (MODELLED)", "### Kimi-K2", "### DeepSeek-V3", "× vs python_heapq",
                   "## tree_verify on an RTX PRO 6000 Blackwell, sm_120 (MODELLED)",
                   "C++ builder not built", "OOM"):  # fmt: skip
        assert needle in md, needle
    pngs = {p.name for p in plots.glob("*.png")}
    assert pngs == {"tree_build_time.png", "tree_build_speedup.png", "tree_verify_prefix.png",
                    "tree_verify_batch.png", "tree_verify_budget.png", "e2e_share.png"}  # fmt: skip
    for p in plots.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 20_000
        assert f"(benchmarks/{p.name})" in md


def test_report_merges_stage_files(tmp_path):
    a, b = synthetic.run(verify=False), synthetic.run(seed=1)
    b["kdtr"]["stage"] = "verify_h64"
    md, _ = _report(tmp_path, a, b, plots=False)
    assert (
        "| perf-0.json | NVIDIA H200 (sm_90) | all |" in md
        and "| perf-1.json | NVIDIA H200 (sm_90) | verify_h64 |" in md
    )
    assert "| device | NVIDIA H200 (sm_90) |" in md


def test_report_names_each_files_device(tmp_path):
    """Files from two GPUs: the header names each device with its files, never one device for all."""
    a, b = synthetic.run(verify=False), synthetic.run(seed=1)
    b["machine_info"]["gpu"] = {**b["machine_info"]["gpu"], "name": "NVIDIA H100 80GB HBM3"}
    md, _ = _report(tmp_path, a, b, plots=False)
    assert "| devices | NVIDIA H200 (sm_90): perf-0.json; NVIDIA H100 80GB HBM3 (sm_90): perf-1.json |" in md
    assert "Numbers hold only with each file's device" in md and "| device | NVIDIA H200" not in md
    assert "| perf-1.json | NVIDIA H100 80GB HBM3 (sm_90) |" in md


def test_report_from_a_cpu_only_run(tmp_path):
    """What `pytest perf --benchmark-json` writes on a machine without a GPU also renders."""
    out = tmp_path / "cpu.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # not an xdist worker
    r = subprocess.run([sys.executable, "-m", "pytest", "perf/bench_tree_build.py", "-k", "cpu and bs1-B16",
                        "--benchmark-json", str(out), "-p", "no:cacheprovider", "-q", "--report-dir", str(tmp_path)],
                       cwd=ROOT, env=env, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:]
    md, _ = _report(tmp_path, json.loads(out.read_text()))
    assert "CPU builders alone" in md and "python_heapq" in md
    assert "## End-to-end analysis (MODELLED)" in md


def test_load_skips_foreign_benchmarks(tmp_path):
    data = synthetic.run(verify=False)
    data["benchmarks"].append({"name": "x", "fullname": "x", "extra_info": {}, "stats": {"median": 1.0}})
    f = tmp_path / "a.json"
    f.write_text(json.dumps(data))
    run = report.load([f])
    assert all(c["schema"] for c in run["cases"]) and len(run["cases"]) == len(data["benchmarks"]) - 1


def test_sm120_model_and_its_twins():
    """The modelled sm_120 line: the tensor-peak ratio, floored by one pass over the bytes at sm_120's bandwidth;
    its inputs are the builds at sm_120's budget, which the H200's plots and end-to-end model leave out."""
    ratio = sm120.H200_BF16_TFLOPS / sm120.RTX_PRO_6000_BF16_TFLOPS
    assert sm120.model_us(100.0, 1000) == (100.0 * ratio, "tensor")
    assert sm120.model_us(1.0, 1792 * 10**6) == (1000.0, "bandwidth")  # 1.792 GB at 1792 GB/s
    twins = {s.variant for s in specs.sm120_twins()}
    assert sm120.VARIANT in twins and all(sm120.is_twin({"variant": v}) for v in twins)
    assert not any(sm120.is_twin({"variant": s.variant}) for s in specs.SPECS if s.variant not in twins)
    run = report.load([])
    run["cases"] = [{"op": "tree_verify", "impl": "cuda", "variant": "portable_99k", "shape": {"H": 64, "Q": 2,
                     "prefix": 8192, "bs": 1}, "time": {"median_us": 10.0}, "bytes": 0}]  # fmt: skip
    (line,) = sm120.lines(run["cases"])
    assert line.sm120_us == 10.0 * ratio and line.bound == "tensor"


def test_step_section_sets_the_step_beside_the_users_round():
    """The step's table: its round, its device time against the sum of its ops alone, their shares, the host waits
    and each users' round with its ratio; an absent comparator leaves no column."""
    from harness import timing
    from harness.bench import record

    t = timing.summary([100.0, 110.0, 120.0], where="host")
    users = record.comparator(timing.summary([1000.0, 1100.0], where="host"))
    case = record.build(
        op="step", impl="cuda:step", shape={"bs": 8, "B": 64, "H": 128, "prefix": 8192, "V": 163840, "L": 16,
                                            "K": 32, "dtype": "bf16"},
        time=t, comparators={"users_round_python_heapq": users},
        extra={"device_us": 95.0, "sum_alone_us": 90.0, "graph_over_sum": 95 / 90, "host_syncs_in_3_rounds": 0,
               "share": {"draft_topk": 0.5, "tree_build": 0.1, "tree_verify": 0.35, "tree_accept": 0.05}},
    )  # fmt: skip
    text = "\n".join(report.step_section([case]))
    row = next(line for line in text.splitlines() if line.startswith("| 128 | 64 | 8 |"))
    assert "| 95 |" in row and "| 90 |" in row and "| 1.06 |" in row and "| 50.0 % |" in row and "| 0 |" in row, row
    assert "users_round_python_heapq µs" in text and "users_round_cpp" not in text
    assert "| 1,050 | 9.55 |" in row, row  # the users round, 1050 / 110
    assert report.step_section([]) == []
    measured = "\n".join(report._measured_step_lines([case], 64))
    assert "| 128 | 8 | 110 | 50.0 % | 10.0 % | 35.0 % | 5.0 % | 65.0 % | python_heapq 9.55× |" in measured, measured
    assert report._measured_step_lines([case], 16) == []


def test_the_step_aims_are_counted_over_its_shapes():
    """Under the step's table: its non-verify work against each users' round's (>= 10x), the graph against its
    kernels' sum (within 5 %), the host waits (none), each counted over the shapes with the range."""
    from harness import timing
    from harness.bench import record

    def case(bs, users_us, over, syncs):
        return record.build(
            op="step", impl="cuda:step", shape={"bs": bs, "B": 64, "H": 128, "prefix": 8192, "V": 163840, "L": 16,
                                                "K": 32, "dtype": "bf16"},
            time=timing.summary([100.0], where="host"),
            comparators={"users_round_cpp": record.comparator(timing.summary([users_us], where="host"))},
            extra={"alone_us": {"draft_topk": 5.0, "tree_build": 3.0, "tree_verify": 35.0, "tree_accept": 2.0},
                   "graph_over_sum": over, "host_syncs_in_3_rounds": syncs},
        )  # fmt: skip

    # non-verify work 10 µs; the users' 135 - 35 = 100 (10x: met) and 85 - 35 = 50 (5x)
    text = "\n".join(report._step_aims([case(1, 135.0, 1.02, 0), case(8, 85.0, 1.08, 1)]))
    assert "≥ 10× vs cpp at 1 of 2 (5–10×)" in text, text
    assert "within 5 % of its kernels' sum at 1 of 2 (device / sum 1.02–1.08)" in text, text
    assert "no host wait in a round at 1 of 2" in text and "python_heapq" not in text, text
    assert report._step_aims([]) == []


def test_the_recorded_command_names_no_machine_path(tmp_path):
    """A perf run's JSON records its command with its output folder written OUT (a committed file names no machine
    path); a path elsewhere stays as typed."""
    from harness.bench import record

    out = tmp_path / "run"
    out.mkdir()
    args = ["perf", f"--benchmark-json={out}/perf-step.json", "--report-dir", f"{out}/logs/x", "-k", "/other/p"]
    assert record.portable_command(args, out / "perf-step.json") == (
        "pytest perf --benchmark-json=OUT/perf-step.json --report-dir OUT/logs/x -k /other/p"
    )
    assert record.portable_command(["perf"], None) == "pytest perf"
    with open(out / "perf-step.json", "wb") as f:  # the file object some pytest-benchmark versions hand over
        assert record.portable_command(args[:2], f) == "pytest perf --benchmark-json=OUT/perf-step.json"


def test_the_operators_round_is_its_own_table_not_a_step_row():
    """perf/bench_torch_ops.py records op "step" with impl "torch-ops": a table of their own (the operators in a graph
    beside Step's graph, the eager costs), never rows of the step's table."""
    from harness import timing
    from harness.bench import record

    shape = {"bs": 8, "B": 64, "H": 128, "prefix": 8192, "V": 163840, "L": 16, "K": 32, "dtype": "bf16"}
    step = record.build(op="step", impl="cuda:step", shape=shape, time=timing.summary([100.0], where="host"),
                        extra={"device_us": 95.0})  # fmt: skip
    ops = record.build(
        op="step", impl=report.TORCH_OPS, shape=shape, time=timing.summary([101.0], where="device"),
        extra={"step_graph_us": 100.0, "eager_round_us": 650.0, "step_eager_round_us": 80.0,
               "eager_overhead_us": {"draft_topk": 90.0, "tree_verify": 110.0}},
    )  # fmt: skip
    text = "\n".join(report.step_section([step, ops]))
    assert sum(line.startswith("| 128 | 64 | 8 |") for line in text.splitlines()) == 2, text  # one row per table
    operators = text.split("### The step as PyTorch operators")[1]
    (row,) = [line for line in operators.splitlines() if line.startswith("| 128")]
    assert row == "| 128 | 64 | 8 | 101 | 100 | 1.0 % | 650 | 80 | draft_topk 90, tree_verify 110 |", row
    assert "### The step as PyTorch operators" in "\n".join(report.step_section([ops]))  # without step records too


def test_step_per_model_lines_add_the_layers_to_the_measured_parts():
    """Per model and TP: tree_verify once per layer, the non-verify work once per step, the users' non-verify time
    (their round less the step's verify) and the milliseconds saved; heads not measured are named."""
    from harness import timing
    from harness.bench import record

    users = record.comparator(timing.summary([1000.0, 1100.0], where="host"))
    case = record.build(
        op="step", impl="cuda:step", shape={"bs": 8, "B": 64, "H": 128, "prefix": 8192, "V": 163840, "L": 16,
                                            "K": 32, "dtype": "bf16"},
        time=timing.summary([100.0], where="host"), comparators={"users_round_python_heapq": users},
        extra={"alone_us": {"draft_topk": 50.0, "tree_build": 10.0, "tree_verify": 35.0, "tree_accept": 5.0}},
    )  # fmt: skip
    text = "\n".join(report.step_per_model_lines([case]))
    (row,) = [line for line in text.splitlines() if line.startswith("| DeepSeek-V3")]
    # work 65 µs; share 65 / (61 · 35 + 65); users' non-verify 1050 - 35 = 1015 µs, 15.6x, 0.95 ms saved
    assert row.startswith("| DeepSeek-V3 (61 layers) | 1 | 128 | 64 | 8 | 35 | 65 | 3.0 % | 1,015 | 15.6 | 0.95 |")
    assert row.endswith("| — | — | — |"), row  # no C++ builder's round
    assert "Not measured in these files: H = 8, 16, 64" in text
    assert report.step_per_model_lines([]) == []


def test_a_race_file_gets_its_section_and_its_provenance(tmp_path):
    """lab.tree_verify_race's JSON: loaded beside pytest-benchmark files, its provenance in the header's file table,
    one table per grid with planned ÷ invariant and the faster peer over each build, the aims counted."""
    import json

    def row(shape, inv, plan, peers):
        times = {"sm90a": {"us": inv}, "sm90a_planned": {"us": plan}, **{n: {"us": v} for n, v in peers.items()}}
        for t in times.values():
            t.update(tflops=100.0, pct_read=10.0)
        return {"shape": shape, "times": times}

    race = {
        "meta": {
            "device": "NVIDIA H100 80GB HBM3",
            "revision": "abc1234",
            "date": "2026-12-07T10:43:39Z",
            "command": "python3 -m lab.tree_verify_race",
        },
        "ceilings": {"read_gbs": 3100.0, "bf16_tflops": 750.0},
        "peers": {},
        "chains": [
            row("H64 Q2 P8k bs1", 40.0, 35.0, {"flashmla": 31.5, "flashinfer_mla": 28.0}),
            row("H16 Q1 P32k bs1", 52.0, 50.0, {"flashmla": 53.0}),
        ],
        "mixed": [],
        "trees": [row("tree H64 Q257 P8k bs1", 620.0, 620.0, {"flashmla_cascade": 1130.0})],
    }
    race["chains"][0]["times"]["flashinfer_mla"] = {"error": "not installed"}  # recorded, not timed
    path = tmp_path / "race.json"
    path.write_text(json.dumps(race))
    run = report.load([str(path)])
    assert run["cases"] == [] and run["runs"][0]["device"] == "NVIDIA H100 80GB HBM3"
    text = report.render(run, command="python -m tools.bench_report race.json")
    assert "| race.json | NVIDIA H100 80GB HBM3 | race | 2026-12-07T10:43:39Z |" in text
    (chain,) = [line for line in text.splitlines() if line.startswith("| H64 Q2 P8k bs1 |")]
    assert chain.endswith("| 0.875 | 0.9 | 0.7875 |"), chain  # 35 / 40; flashmla 31.5 / 35; 31.5 / 40
    assert "Aims met: planned ≥ 1.0× the faster peer at 1 of 2 shapes" in text
    assert "Aims met: planned ≥ 1.3× the faster peer at 1 of 1 shapes" in text  # 1130 / 620
    assert "- H64 Q2 P8k bs1 flashinfer_mla: not installed" in text
    assert "### mixed-length batches" not in text  # an empty grid has no table
