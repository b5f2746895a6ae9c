"""Compile-only checks of every kernel (spec/build.md): no GPU needed, run in CI."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys

import pytest

from harness import device
from kernels_cu import runtime

pytestmark = pytest.mark.nvrtc


@pytest.fixture(scope="module", autouse=True)
def _nvrtc_available(request):
    ok, why = device.nvrtc_available()
    if not ok:
        (pytest.fail if request.config.getoption("--require-tools") else pytest.skip)(f"NVRTC unavailable: {why}")


@pytest.mark.spec("KB.1.1", "KB.1.2")
@pytest.mark.parametrize("arch", runtime.ARCHS)
@pytest.mark.parametrize("slug", sorted(runtime.ENTRY))
def test_compiles_without_spills(request, slug, arch):
    c = runtime.compile_kernel(slug, arch)
    assert c.cubin[:4] == b"\x7fELF", f"{slug} for {arch} is not an ELF cubin"
    assert runtime.ENTRY[slug] in c.resources, f"ptxas report has no entry for {runtime.ENTRY[slug]}:\n{c.log}"
    for entry, r in sorted(c.resources.items()):  # every entry function of the module, not only the main one
        request.node.user_properties.append(("kernel_resources", {"kernel": entry, "arch": arch, **r}))
    for entry, r in sorted(c.resources.items()):
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, f"[KB.1.2] {entry} spills on {arch}: {r}"
        assert r["stack"] == 0, f"[KB.1.2] {entry} uses a {r['stack']}-byte stack frame (local memory) on {arch}"


@pytest.mark.spec("KB.1.3")
def test_compile_error_carries_log(tmp_path, monkeypatch):
    (tmp_path / "broken.cu").write_text('extern "C" __global__ void k() { undefined_thing = 1; }\n')
    monkeypatch.setattr(runtime, "HERE", tmp_path)
    monkeypatch.setenv("KDTR_DISABLE_CACHE", "1")
    runtime.compile_kernel.cache_clear()
    try:
        with pytest.raises(runtime.CompileError, match='identifier "undefined_thing" is undefined'):
            runtime.compile_kernel("broken", "sm_90")
    finally:
        runtime.compile_kernel.cache_clear()


@pytest.mark.spec("KB.1.3")
def test_arch_must_be_a_real_sm():
    with pytest.raises(ValueError, match="arch: 'compute_90'"):
        runtime.compile_kernel("tree_build", "compute_90")


_CHILD = """
import os, sys
sys.path.insert(0, os.getcwd())
from kernels_cu import runtime
c = runtime.compile_kernel(sys.argv[1], "sm_90")
print(int(c.cached), len(c.cubin))
"""


@pytest.mark.spec("KB.1.4")
def test_cache_hits_and_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("KDTR_CACHE_DIR", str(tmp_path / "cache"))
    env = {**os.environ, "KDTR_CACHE_DIR": str(tmp_path / "cache")}
    root = runtime.HERE.parent
    first = subprocess.run(
        [sys.executable, "-c", _CHILD, "tree_accept"], cwd=root, env=env, capture_output=True, text=True
    )
    second = subprocess.run(
        [sys.executable, "-c", _CHILD, "tree_accept"], cwd=root, env=env, capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[0] == "0" and second.stdout.split()[0] == "1", (first.stdout, second.stdout)
    assert first.stdout.split()[1] == second.stdout.split()[1]
    k1 = runtime.cache_key("tree_accept", "sm_90")
    monkeypatch.setattr(
        runtime, "source_with_headers", lambda slug: ("// same source", {"common.cuh": "// a changed header"})
    )
    assert runtime.cache_key("tree_accept", "sm_90") != k1


@pytest.mark.spec("KB.1.4")
def test_concurrent_writers_leave_whole_entries(tmp_path):
    """Eight processes compile the same kernel into an empty cache at once; every entry read back is whole."""
    env = {**os.environ, "KDTR_CACHE_DIR": str(tmp_path / "cache")}
    root = runtime.HERE.parent

    def one(_):
        return subprocess.run(
            [sys.executable, "-c", _CHILD, "tree_build"], cwd=root, env=env, capture_output=True, text=True
        )

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(8)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results if r.returncode]
    sizes = {r.stdout.split()[1] for r in results}
    assert len(sizes) == 1
    files = sorted(p.name for p in (tmp_path / "cache" / f"v{runtime.SCHEMA}").iterdir())
    assert not [f for f in files if f.startswith(".tmp-")], files
    again = subprocess.run(
        [sys.executable, "-c", _CHILD, "tree_build"], cwd=root, env=env, capture_output=True, text=True
    )
    assert again.stdout.split() == ["1", sizes.pop()]
