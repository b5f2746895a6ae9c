"""Every deliberately broken kernel (harness/kernel_mutants.py) must fail the GPU conformance suite."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from harness import kernel_mutants
from kernels_cu import runtime

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(kernel_mutants.MUTANTS) + sorted(kernel_mutants.SLOWDOWNS))
def test_mutant_patch_applies_and_compiles(name):
    """CPU-side half: the patch still matches the source and the broken (or slowed) kernel still compiles."""
    for spec in kernel_mutants.mutated_specs(name):
        assert runtime.compile_kernel(spec, spec.archs[0]).cubin


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(kernel_mutants.MUTANTS))
def test_kernel_mutant_is_killed(name, request, tmp_path):
    slug = kernel_mutants.MUTANTS[name][0]
    # judged by the variants built from the patched source (named, so one outside the default selection runs)
    impl_args = [a for s in kernel_mutants.mutated_specs(name) for a in ("--impl", f"cuda:{s.variant}")]
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci"}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        f"conformance/test_{slug}.py",
        "conformance/test_fixtures.py",
        *impl_args,
        "--require-gpu",
        "-p",
        "harness.kernel_mutants",
        "--kernel-mutant",
        name,
        "-x",
        "-q",
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "--report-dir",
        str(tmp_path),
    ]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    killer = re.search(r"^FAILED (\S+)", out.stdout, re.M)
    request.node.user_properties.append(
        (
            "mutants",
            {
                name: {
                    "killed": bool(killer) and out.returncode == 1,
                    "by": killer.group(1) if killer else None,
                    "description": f"CUDA {slug}",
                }
            },
        )
    )
    assert out.returncode == 1 and killer, f"kernel mutant {name} survived (rc={out.returncode}):\n{out.stdout[-3000:]}"
