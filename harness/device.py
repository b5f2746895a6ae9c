"""Environment facts for the harness: the GPU probe and NVRTC version (from kernels_cu.cuda_env, which
never touches cuda.core's driver-backed APIs), driver and package versions, the git revision, GPU ids."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import subprocess

from kernels_cu.cuda_env import Probe, nvrtc_available, nvrtc_version, probe

__all__ = ["Probe", "nvrtc_available", "nvrtc_version", "probe"]


def driver_version_string() -> str:
    """The kernel-mode driver version from nvidia-smi when present (e.g. 580.159.03)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def package_versions() -> dict[str, str]:
    out = {}
    for p in (
        "numpy",
        "ml_dtypes",
        "hypothesis",
        "pytest",
        "pytest-xdist",
        "pytest-benchmark",
        "cuda-bindings",
        "cuda-core",
        "cuda-pathfinder",
        "nvidia-cuda-nvrtc",
        "torch",
        "nvidia-cublas",
        "cupy-cuda13x",
        "matplotlib",
    ):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[p] = importlib.metadata.version(p)
    return out


def git_revision(root: str) -> str:
    """GIT_REVISION when set (a GPU runner's copy of the tree, or a tree copied inside another repository,
    where `git` would answer for the wrong repository), else the checkout's short revision (+dirty)."""
    if os.environ.get("GIT_REVISION"):
        return os.environ["GIT_REVISION"]
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        if top and os.path.realpath(top) != os.path.realpath(root):
            return "unknown (not a checkout of this project; set GIT_REVISION)"
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if rev:
            return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "unknown (no git checkout; set GIT_REVISION)"


def visible_gpu_ids() -> list[str]:
    """The GPUs this process may use, found without initialising CUDA (which would pin the process):
    KDTREE_GPUS (comma list) or CUDA_VISIBLE_DEVICES when set, else one id per `nvidia-smi -L` line."""
    for var in ("KDTREE_GPUS", "CUDA_VISIBLE_DEVICES"):
        if os.environ.get(var) is not None:
            return [x.strip() for x in os.environ[var].split(",") if x.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]


def array_library(name: str):
    """The GPU array library `name` (cupy or torch) for a test that hands the kernels device arrays, or the test is
    skipped with why it cannot be used here (not installed; torch without CUDA)."""
    import importlib

    import pytest

    try:
        mod = importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not installed")
    if name == "torch" and not mod.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return mod
