"""Issue 5's plumbing, checked without GPUs: each xdist worker gets one GPU id from the controller before
CUDA initialises, and the conformance report merges every worker's results."""

import json
import os
import pathlib
import subprocess
import sys
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent

PROBE = """
import os, pytest
@pytest.mark.spec("KB.1.4")
@pytest.mark.parametrize("i", range(8))
def test_where(i, record_property):
    with open(os.environ["KDTREE_PROBE_OUT"] + "/" + os.environ["PYTEST_XDIST_WORKER"], "w") as f:
        f.write(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
"""


def _run(tmp_path, gpus, workers):
    # In conformance/ for its conftest; unique, since tests run in parallel; and named outside python_files
    # (test_*.py), so that a pytest collecting conformance/ at the same time never sees it (two kernel-mutant
    # judgings once failed on collecting a probe that this test was deleting). Named on the command line,
    # pytest collects it all the same.
    probe = ROOT / "conformance" / f"xdist_probe_{uuid.uuid4().hex[:12]}.py"
    probe.write_text(PROBE)
    (tmp_path / "out").mkdir()
    env = {**os.environ, "KDTREE_GPUS": gpus, "KDTREE_PROBE_OUT": str(tmp_path / "out")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(probe),
                "-n",
                str(workers),
                "-q",
                "-p",
                "no:cacheprovider",
                "--report-dir",
                str(tmp_path / "rep"),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        probe.unlink()
    assert r.returncode == 0, r.stdout + r.stderr
    seen = {p.name: p.read_text() for p in (tmp_path / "out").iterdir()}
    report = json.loads((tmp_path / "rep" / "conformance.json").read_text())
    return seen, report


def test_one_gpu_per_worker_and_merged_report(tmp_path):
    seen, report = _run(tmp_path, "0,1", 2)
    assert seen == {"gw0": "0", "gw1": "1"}
    assert report["summary"]["tests"]["passed"] == 8  # both workers' results in one report
    assert report["environment"]["worker_gpus"] == {"gw0": "0", "gw1": "1"}


def test_two_workers_share_one_gpu(tmp_path):
    seen, report = _run(tmp_path, "0", 2)
    assert seen == {"gw0": "0", "gw1": "0"}
    assert report["summary"]["tests"]["passed"] == 8


def test_cpu_only_machine_pins_nothing(tmp_path):
    seen, report = _run(tmp_path, "", 2)
    assert seen == {"gw0": "unset", "gw1": "unset"}
    assert report["summary"]["tests"]["passed"] == 8
