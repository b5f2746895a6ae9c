"""The GPU CI workflow and the suite script it calls lint clean: actionlint over .github/workflows (it runs
shellcheck on every `run:` block when shellcheck is installed) and shellcheck over tools/gpu_suite.sh and
tools/peers_setup.sh."""

import os
import pathlib
import shutil
import subprocess
import sys

from harness import tools

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent  # the test extra installs both linters into the environment


def _tool(request, name):
    path = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if path is None:
        tools.missing(request.config, f"{name} is not installed (pip install -e '.[test]')")
    return path


def test_workflows_lint_clean(request):
    actionlint = _tool(request, "actionlint")
    _tool(request, "shellcheck")  # actionlint finds it on PATH and checks the run: scripts with it
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run([actionlint, "-no-color", "-oneline"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"actionlint:\n{out.stdout}{out.stderr}"
    assert list((ROOT / ".github" / "workflows").glob("*.yml")), "no workflow found"


def test_gpu_suite_script_shellchecks(request):
    shellcheck = _tool(request, "shellcheck")
    scripts = ["tools/gpu_suite.sh", "tools/peers_setup.sh"]
    out = subprocess.run([shellcheck, *scripts], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, f"shellcheck {' '.join(scripts)}:\n{out.stdout}{out.stderr}"


def test_workflow_calls_the_suite_script():
    """The workflow sets up with the README's command and runs the project's GPU suite script."""
    text = (ROOT / ".github" / "workflows" / "gpu.yml").read_text()
    for needle in ("make setup", "tools/gpu_suite.sh", "sm_90", "sm_120", "upload-artifact", "KDTREE_PERF_BASELINE"):
        assert needle in text, f"gpu.yml lacks {needle!r}"
