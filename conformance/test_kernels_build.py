"""Compile-only checks of every kernel build spec (spec/build.md): no GPU needed, run in CI; and, on a GPU,
the geometry the query kernels report equals the same header compiled as host C++ (as the engine uses it)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import shutil
import subprocess
import sys

import pytest

from harness import device, tools
from kernels_cu import geometry, ops, resources, runtime, specs

pytestmark = pytest.mark.nvrtc

BUILDS = [pytest.param(s, a, id=f"{s.name}@{a}") for s in specs.SPECS for a in s.archs]


@pytest.fixture(scope="module", autouse=True)
def _nvrtc_available(request):
    ok, why = device.nvrtc_available()
    if not ok:
        tools.missing(request.config, f"NVRTC unavailable: {why}")


@pytest.mark.spec("KB.1.1", "KB.1.2")
@pytest.mark.parametrize("spec,arch", BUILDS)
def test_compiles_without_spills(request, spec, arch):
    c = runtime.compile_kernel(spec, arch)
    assert c.cubin[:4] == b"\x7fELF", f"{spec.name} for {arch} is not an ELF cubin"
    for entry in spec.entries:
        assert entry in c.resources, f"ptxas report has no entry for {entry}:\n{c.log}"
        r = c.resources[entry]
        request.node.user_properties.append(
            ("kernel_resources", {"kernel": entry, "variant": spec.variant, "arch": arch, **r})
        )
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, f"[KB.1.2] {entry} spills on {arch}: {r}"
        assert r["stack"] == 0, f"[KB.1.2] {entry} uses a {r['stack']}-byte stack frame (local memory) on {arch}"


@pytest.mark.spec("KB.1.1")
def test_variants_differ_in_their_defines():
    """Two variants of one source are two builds (their defines reach the cache key), not one cubin twice."""
    smem, glob = specs.get("tree_build", "heap_smem"), specs.get("tree_build", "heap_global")
    assert runtime.cache_key(smem, "sm_90") != runtime.cache_key(glob, "sm_90")


@pytest.mark.spec("KB.1.3")
def test_compile_error_carries_log(tmp_path, monkeypatch):
    (tmp_path / "broken.cu").write_text('extern "C" __global__ void k() { undefined_thing = 1; }\n')
    monkeypatch.setattr(runtime, "HERE", tmp_path)
    monkeypatch.setenv("KDTREE_DISABLE_CACHE", "1")
    broken = specs.KernelSpec("broken", "x", "a kernel that does not compile", "broken.cu", "k", "k", 32)
    with pytest.raises(runtime.CompileError, match='identifier "undefined_thing" is undefined'):
        runtime.compile_kernel(broken, "sm_90")


@pytest.mark.spec("KB.1.3")
def test_arch_must_be_a_real_sm():
    with pytest.raises(ValueError, match="arch: 'compute_90'"):
        runtime.compile_kernel(specs.SPECS[0], "compute_90")


# run with the repository root as its working directory, which `python -c` puts first on sys.path
_CHILD = """
import sys
from kernels_cu import geometry, runtime, specs
c = runtime.compile_kernel(specs.get(*sys.argv[1].split(":")), "sm_90")
print(int(c.cached), len(c.cubin))
"""


def _child(name, env):
    root = runtime.HERE.parent
    return subprocess.run([sys.executable, "-c", _CHILD, name], cwd=root, env=env, capture_output=True, text=True)


@pytest.mark.spec("KB.1.4")
def test_cache_hits_and_keys(tmp_path, monkeypatch):
    env = {**os.environ, "KDTREE_CACHE_DIR": str(tmp_path / "cache")}
    first, second = _child("tree_accept:pointer_jump", env), _child("tree_accept:pointer_jump", env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[0] == "0" and second.stdout.split()[0] == "1", (first.stdout, second.stdout)
    assert first.stdout.split()[1] == second.stdout.split()[1]
    spec = specs.get("tree_accept", "pointer_jump")
    k1 = runtime.cache_key(spec, "sm_90")
    monkeypatch.setattr(
        runtime, "source_with_headers", lambda spec: ("// same source", {"common.cuh": "// a changed header"})
    )
    assert runtime.cache_key(spec, "sm_90") != k1


@pytest.mark.spec("KB.1.4")
def test_concurrent_writers_leave_whole_entries(tmp_path):
    """Eight processes compile the same kernel into an empty cache at once; every entry read back is whole."""
    env = {**os.environ, "KDTREE_CACHE_DIR": str(tmp_path / "cache")}
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda _: _child("tree_build:heap_smem", env), range(8)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results if r.returncode]
    sizes = {r.stdout.split()[1] for r in results}
    assert len(sizes) == 1
    files = sorted(p.name for p in (tmp_path / "cache" / f"v{runtime.SCHEMA}").iterdir())
    assert not [f for f in files if f.startswith(".tmp-")], files
    assert _child("tree_build:heap_smem", env).stdout.split() == ["1", sizes.pop()]


SHAPES = [(0, 0, 0), (1, 1, 1), (16, 15, 16), (64, 15, 64), (1024, 32, 1024), (1024, 15, 8)]


@pytest.mark.spec("KB.1.5")
def test_geometry_headers_build_as_a_host_library():
    """The headers compile as plain host C++ (the engine's host code and kernels_cu/geometry.py use them so)
    and give the sizes the layouts imply."""
    smem0, staged0, cap0 = geometry.tree_build(64, 15, 64, 0, 1)
    smem1, staged1, cap1 = geometry.tree_build(64, 15, 64, 1 << 40, 1)
    assert (staged0, staged1, cap0, cap1) == (0, 1, 0, 0) and smem1 - smem0 == 15 * 64 * 4  # the staged log-probs
    assert geometry.tree_build(64, 15, 64, 1 << 40, 0) == (smem0, 0, 0)  # the heap_global policy never stages
    # select_verify: about 4B + 64 candidates (root included) of 48 bytes at L = 15 where they fit, none where not
    smem2, _, cap2 = geometry.tree_build(64, 15, 64, 1 << 40, 0, 1)
    assert cap2 == 4 * 64 + 65 and smem2 > smem0
    assert geometry.tree_build(64, 15, 64, 0, 0, 1) == (smem0, 0, 0)
    smem3, _, cap3 = geometry.tree_build(1024, 32, 1024, 227 * 1024, 0, 1)
    assert 1024 + 2 <= cap3 < 4 * 1024 + 65 and smem3 <= 227 * 1024 - 1024
    assert geometry.tree_accept(1025) == (6 * 1025 + 33) * 4
    assert (
        geometry.tree_verify(1, 1, 0, budget=geometry.unbounded_budget())["threads"]
        == specs.get("tree_verify", "portable").block
    )


@pytest.mark.spec("KB.1.5")
def test_race_geometry_and_launch_rule():
    """select_race's layout gives the replay and the selection their own regions (the race runs both at once),
    and its launch hands batches wider than a wave of races to the replay's own build."""
    limit = 227 * 1024
    smem_seq, staged, cap_seq = geometry.tree_build(64, 15, 64, limit, 2, 1, 0)
    smem_race, staged_r, cap_race = geometry.tree_build(64, 15, 64, limit, 2, 1, 1)
    assert staged == staged_r == 1 and cap_seq == cap_race == 4 * 64 + 65  # both fit at B = 64
    # the race adds the replay's frontier and tuple words and the selection's own nodes (D x 28 bytes, 16-aligned)
    frontier_words = 32 * ((64 + 31) // 32 + 2) * 16 + 65 * 3 * 8
    assert smem_race - smem_seq == frontier_words + (65 * 28 + 15) // 16 * 16
    # where shared memory is short the race holds fewer candidates, never more than fit
    _, _, cap_seq_1k = geometry.tree_build(1024, 15, 1024, limit, 2, 1, 0)
    smem_race_1k, _, cap_race_1k = geometry.tree_build(1024, 15, 1024, limit, 2, 1, 1)
    assert 1024 + 2 <= cap_race_1k < cap_seq_1k and smem_race_1k <= limit - 1024
    assert geometry.tree_build(64, 15, 64, 0, 2, 1, 1)[2] == 0  # nothing fits: the replay alone
    # one race per SM, two at B >= 512, and from the type's budget on; otherwise the batch goes to lane_cached
    race = geometry.tree_build_policy("select_race")
    assert race["race_min_b"] == 256 and geometry.tree_build_variants()[race["hand_off"]] == "lane_cached"

    def runs(bs, B, min_b=None):
        return geometry.tree_build_launch("select_race", race, bs, B, 15, 64, limit, 132, min_b)["variant"]

    assert runs(132, 256) == "select_race"
    assert runs(133, 256) == "lane_cached"
    assert runs(1, 128) == "lane_cached"
    assert runs(1, 64, 1) == "select_race"
    assert runs(264, 512) == "select_race"
    assert runs(265, 1024) == "lane_cached"
    assert geometry.tree_build_policy("lane_cached")["select_cap"] == 0


@pytest.mark.spec("KB.1.5")
def test_tree_build_variants_are_types():
    """Every tree_build spec names a variant type of tree_build_variants.cuh (its `_99k` twin its base's) and nothing
    else: no policy define (the type holds them) and none of the design overrides only lab/tree_build_dev.py uses."""
    types = geometry.tree_build_variants()
    for s in specs.for_op("tree_build"):
        d = s.all_defines()
        assert d["TB_VARIANT"] == s.variant.removesuffix("_99k") and d["TB_VARIANT"] in types, s.name
        assert set(d) <= {"KERNEL_BLOCK", "TB_VARIANT", "KERNEL_SMEM_BUDGET"}, (s.name, d)
    assert sorted(types) == sorted({s.variant.removesuffix("_99k") for s in specs.for_op("tree_build")})


@pytest.mark.gpu
@pytest.mark.spec("KB.1.5")
def test_geometry_host_equals_device():
    """Each spec's query kernel evaluates the same header on the GPU: the numbers the host library gives."""
    import numpy as np

    from kernels_cu import tree_build_ops

    if not device.probe().ok:
        pytest.skip(f"GPU unavailable: {device.probe().reason}")
    for spec in specs.for_op("tree_build"):
        for B, L, K in SHAPES:
            for limit in (0, 100 * 1024, 1 << 40):  # nothing fits / a consumer GPU's limit / everything fits
                dev = runtime.geometry(spec, (np.int32(B), np.int32(L), np.int32(K), np.int64(limit)), 3)
                host = geometry.tree_build(B, L, K, limit, *tree_build_ops.policies(spec))
                assert dev == host, (spec.name, B, L, K, limit)
    for spec in specs.for_op("tree_accept"):
        for D in (1, 2, 65, 1025):
            assert runtime.geometry(spec, (np.int32(D),), 1) == (geometry.tree_accept(D),)


@pytest.mark.spec("KB.1.1")
def test_specs_are_well_formed():
    names = [s.name for s in specs.SPECS]
    assert len(names) == len(set(names)), "two specs share a name"
    for s in specs.SPECS:
        assert (runtime.HERE / s.source).is_file(), s
        assert s.block % 32 == 0 and 32 <= s.block <= 1024, s
        assert dataclasses.replace(s) == s


def _sass(spec, arch, tmp_path) -> str:
    """The SASS of the spec's main entry function in its cubin for `arch`, as cuobjdump prints it."""
    from cuda import pathfinder

    tool = pathfinder.find_nvidia_binary_utility("cuobjdump") or shutil.which("cuobjdump")
    if tool is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    cubin = tmp_path / f"{spec.variant}.cubin"
    cubin.write_bytes(runtime.compile_kernel(spec, arch).cubin)
    env = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(tool), os.environ.get("PATH", "")])}
    r = subprocess.run([tool, "-sass", "-fun", spec.entry, str(cubin)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, f"cuobjdump failed on {spec.name}:\n{r.stderr}"
    return r.stdout


HOPPER = re.compile(r"\b(HGMMA|UTMALDG|UBLKCP)\b")


@pytest.mark.spec("KB.1.6")
@pytest.mark.parametrize("spec", [s for s in specs.SPECS if "sm_90a" in s.archs], ids=lambda s: s.name)
def test_sm90a_variant_uses_wgmma_and_tma(spec, tmp_path):
    found = set(HOPPER.findall(_sass(spec, "sm_90a", tmp_path)))
    assert "HGMMA" in found, f"[KB.1.6] no warpgroup MMA (HGMMA) in {spec.entry}'s SASS"
    assert found & {"UTMALDG", "UBLKCP"}, f"[KB.1.6] no TMA load (UTMALDG / UBLKCP) in {spec.entry}'s SASS"


@pytest.mark.spec("KB.1.6")
def test_portable_variant_has_neither(tmp_path):
    """The same check on the mma.sync kernel built for sm_90a finds nothing: the test above can fail."""
    assert not HOPPER.findall(_sass(specs.get("tree_verify", "portable"), "sm_90a", tmp_path))


def _usage(path, arch=None):
    try:
        return resources.read(path, arch)
    except resources.ToolMissing as e:
        pytest.skip(str(e))


def _fit(spec, arch, usage: dict, entry_name=lambda e: e) -> tuple[dict, dict]:
    """(resources per entry, problems per entry) of the build of `spec` for `arch` whose functions are `usage`."""
    limits = geometry.arch_limits(arch)
    static = {e: usage[entry_name(e)].static_smem(limits) for e in spec.entries if entry_name(e) in usage}
    missing = [entry_name(e) for e in spec.entries if entry_name(e) not in usage]
    assert not missing, f"[KB.1.7] {spec.name} for {arch}: no {missing} in the cubin (has {sorted(usage)})"
    plan = ops.launches(spec, geometry.smem_budget(spec, arch))
    assert set(plan) == set(spec.entries), f"{spec.name}: launches() covers {sorted(plan)}, not {spec.entries}"
    found, bad = {}, {}
    for entry, (threads, dynamic) in plan.items():
        u = usage[entry_name(entry)]
        found[entry] = {"registers": u.registers, "threads": threads, "static_smem": static[entry],
                        "dynamic_smem": dynamic, "block_limit": limits["smem_per_block_optin"]}  # fmt: skip
        p = resources.problems(limits, u, threads, dynamic)
        if p:
            bad[entry] = p
    return found, bad


@pytest.mark.spec("KB.1.7")
@pytest.mark.parametrize("spec,arch", BUILDS)
def test_kernel_fits_its_arch(request, spec, arch, tmp_path):
    c = runtime.compile_kernel(spec, arch)
    cubin = tmp_path / f"{spec.variant}.cubin"
    cubin.write_bytes(c.cubin)
    usage = _usage(cubin, arch)[arch]
    found, bad = _fit(spec, arch, usage)
    for entry, r in found.items():  # the cubin's numbers are ptxas's
        assert (r["registers"], r["static_smem"]) == (c.resources[entry]["registers"], c.resources[entry]["smem"]), (
            f"cuobjdump and ptxas disagree on {entry} ({arch}): {r} vs {c.resources[entry]}"
        )
        request.node.user_properties.append(("kernel_fit", {"kernel": entry, "variant": spec.variant, "arch": arch,
                                                            **r, "fits": entry not in bad}))  # fmt: skip
    assert not bad, f"[KB.1.7] {spec.name} does not fit {arch}: {bad}"


SM120_CERTIFIED = [s for s in specs.SPECS if s.variant.endswith("_99k")]


@pytest.mark.spec("KB.1.7")
@pytest.mark.parametrize("spec", SM120_CERTIFIED, ids=lambda s: s.name)
def test_99k_variant_builds_what_sm120_runs(spec):
    """A *_99k variant built for sm_90 plans the shared-memory budget, tiles and launches that its base variant's
    sm_120 build plans, from the same source and defines: what an H200 certifies is what an sm_120 GPU runs."""
    base = specs.get(spec.slug, spec.variant.removesuffix("_99k"))
    assert spec.source == base.source and spec.archs == ("sm_90",) and "sm_120" in base.archs
    assert {k: v for k, v in spec.defines if k != "KERNEL_SMEM_BUDGET"} == dict(base.defines)
    sm120 = geometry.arch_limits("sm_120")["smem_per_block_optin"]
    assert (
        specs.SM120_SMEM_BUDGET == sm120 == geometry.smem_budget(spec, "sm_90") == geometry.smem_budget(base, "sm_120")
    )
    assert geometry.smem_budget(base, "sm_90") > sm120  # the base variant's H200 build keeps its own budget
    assert ops.launches(spec, geometry.smem_budget(spec, "sm_90")) == ops.launches(base, sm120)


@pytest.mark.spec("KB.1.7")
def test_every_budget_bound_variant_is_certified():
    """Every tree_build or tree_verify variant whose launch depends on the shared-memory limit has a _99k twin."""
    bound = [
        s.name
        for s in specs.SPECS
        if "sm_120" in s.archs
        and ops.launches(s, geometry.smem_budget(s, "sm_90")) != ops.launches(s, geometry.smem_budget(s, "sm_120"))
    ]
    assert sorted(bound) == sorted(s.name.removesuffix("_99k") for s in SM120_CERTIFIED)


@pytest.mark.spec("KB.1.7")
def test_engine_build_fits_its_archs(request):
    """The engine's nvcc build (its entries renamed ENTRY__SLUG__VARIANT) against the same limits and launches."""
    binary = tools.required_binary(request.config, "kdtree-engine")
    usage = _usage(binary)
    if not usage:
        why = "kdtree-engine was built without nvcc (tools/setup.sh says why): it embeds no cubin"
        tools.missing(request.config, why)
    bad = {}
    for spec in specs.engine_specs():
        for arch in spec.archs:
            _, b = _fit(spec, arch, usage.get(arch, {}), lambda e, s=spec: f"{e}__{s.slug}__{s.variant}")
            if b:
                bad[f"{spec.name}@{arch}"] = b
    assert not bad, f"[KB.1.7] the engine's build does not fit: {bad}"


def engine_stack_problems(usage: dict) -> dict[str, str]:
    """Each kernel variant's entry in the engine's nvcc build (`usage`: resources.read of the binary) that has a
    stack frame or local memory (spills go to the stack frame), or is missing."""
    bad = {}
    for spec in specs.engine_specs():
        for arch in spec.archs:
            for entry in spec.entries:
                name = f"{entry}__{spec.slug}__{spec.variant}"
                u = usage.get(arch, {}).get(name)
                if u is None:
                    bad[f"{name}@{arch}"] = "not in the binary"
                elif u.stack or u.local:
                    bad[f"{name}@{arch}"] = f"{u.stack}-byte stack frame, {u.local} bytes of local memory"
    return bad


@pytest.mark.spec("KB.1.2")
def test_engine_build_has_no_stack_frame(request):
    """The engine's nvcc build of every kernel variant (the same sources through nvcc's front end, whose PTX
    differs from NVRTC's) has no stack frame and no local memory either, for every arch it embeds."""
    binary = tools.required_binary(request.config, "kdtree-engine")
    usage = _usage(binary)
    if not usage:
        tools.missing(request.config, "kdtree-engine was built without nvcc (tools/setup.sh says why): no cubin")
    bad = engine_stack_problems(usage)
    assert not bad, f"[KB.1.2] the engine's nvcc build uses local memory: {bad}"


@pytest.mark.spec("KB.1.2")
def test_engine_stack_check_can_fail():
    """The engine's no-stack check reads cuobjdump's STACK and LOCAL columns: an 8-byte frame (what nvcc's
    lane_cached build for sm_90 had) is named."""
    spec = next(s for s in specs.engine_specs() if s.variant == "lane_cached")
    clean = resources.Usage(48, 1040, 0, 0)
    usage = {a: {f"{e}__{s.slug}__{s.variant}": clean for s in specs.engine_specs() for e in s.entries}
             for a in {a for s in specs.engine_specs() for a in s.archs}}  # fmt: skip
    assert engine_stack_problems(usage) == {}
    usage["sm_90"][f"tree_build_kernel__tree_build__{spec.variant}"] = resources.Usage(48, 1040, 8, 0)
    assert engine_stack_problems(usage) == {
        "tree_build_kernel__tree_build__lane_cached@sm_90": "8-byte stack frame, 0 bytes of local memory"
    }


@pytest.mark.spec("KB.1.7")
def test_res_usage_parses_cubins_and_fat_binaries():
    """The reader takes a cubin's listing (no arch in it) and a fat binary's (one section per arch)."""
    one = " Function k:\n  REG:30 STACK:0 SHARED:1040 LOCAL:0 CONSTANT[0]:920 TEXTURE:0\n"
    assert resources.parse("Resource usage:\n" + one, "sm_90") == {"sm_90": {"k": resources.Usage(30, 1040, 0, 0)}}
    fat = f"\nFatbin elf code:\n====\narch = sm_90\n\nResource usage:\n{one}\narch = sm_120\n\nResource usage:\n"
    assert resources.parse(fat + one.replace("REG:30", "REG:31")) == {
        "sm_90": {"k": resources.Usage(30, 1040, 0, 0)},
        "sm_120": {"k": resources.Usage(31, 1040, 0, 0)},
    }
    with pytest.raises(ValueError, match="names no arch"):
        resources.parse(one)


@pytest.mark.spec("KB.1.7")
def test_the_check_can_fail():
    """One block over each limit is refused: the registers, the shared memory, the threads."""
    lim = geometry.arch_limits("sm_120")
    fits = resources.Usage(registers=64, shared=1024, stack=0, local=0)
    assert resources.problems(lim, fits, 1024, 101376 - 0) == []  # 64 x 1024 registers, the whole opt-in limit
    assert resources.problems(lim, resources.Usage(65, 1024, 0, 0), 1024, 0)  # 72 x 1024 after rounding
    assert resources.problems(lim, fits, 256, 101376 + 1)
    assert resources.problems(lim, resources.Usage(64, 1024 + 16, 0, 0), 256, 101376 - 8)  # static counts too
    assert resources.problems(lim, fits, 1056, 0)
    assert resources.problems(lim, resources.Usage(256, 1024, 0, 0), 32, 0)
    assert resources.problems(geometry.arch_limits("sm_90"), fits, 256, 196096) == []
    assert "smem_per_block_optin 101376" in " ".join(resources.problems(lim, fits, 256, 196096))


@pytest.mark.gpu
@pytest.mark.spec("KB.1.7")
def test_arch_table_matches_the_device():
    """arch_limits.cuh's row for the GPU's arch is what the device reports."""
    if not device.probe().ok:
        pytest.skip(f"GPU unavailable: {device.probe().reason}")
    p = runtime.gpu().device.properties
    row = geometry.arch_limits(runtime.gpu().arch)
    got = {
        "smem_per_block_optin": p.max_shared_memory_per_block_optin,
        "smem_per_sm": p.max_shared_memory_per_multiprocessor,
        "smem_reserved_per_block": p.reserved_shared_memory_per_block,
        "smem_static_max": p.max_shared_memory_per_block,
        "regs_per_sm": p.max_registers_per_multiprocessor,
        "regs_per_block": p.max_registers_per_block,
        "threads_per_block": p.max_threads_per_block,
        "threads_per_sm": p.max_threads_per_multiprocessor,
    }
    assert {k: row[k] for k in got} == {k: int(v) for k, v in got.items()}


def _tile_text(spec, arch) -> str:
    budget = geometry.smem_budget(spec, arch)
    parts = []
    for dt in ("bf16", "fp32"):
        g = geometry.tree_verify(1, 1, geometry.tree_verify_variant(dt), budget=budget)
        how = "a prefetch into registers" if g["prefetch"] else "cp.async"
        parts.append(f"{dt} {g['m_tile']} rows x {g['block_n']} keys, {g['kv_stages']} KV stage(s) by {how}, "
                     f"{g['smem_bytes']} bytes")  # fmt: skip
    return "; ".join(parts)


@pytest.mark.spec("KB.1.7")
@pytest.mark.parametrize("arch", specs.PORTABLE_ARCHS)
def test_what_each_arch_runs(request, arch):
    """Every op has a variant for each portable arch; the report lists them, tree_verify's tile there, and which
    sm_90 build certifies an sm_120 variant (its *_99k twin)."""
    twins = {s.name.removesuffix("_99k"): s.variant for s in SM120_CERTIFIED}
    ops_text = []
    for slug in ("tree_build", "tree_accept", "tree_verify"):
        runs = [s for s in specs.for_op(slug) if s.default and s.runs_on(arch)]
        assert runs, f"no {slug} variant runs on {arch}"
        names = [s.variant + (f" (certified on sm_90 as {twins[s.name]})" if arch == "sm_120" and s.name in twins
                              else "") for s in runs]  # fmt: skip
        ops_text.append(f"{slug}: {', '.join(names)}")
    portable = specs.get("tree_verify", "portable")
    tile = _tile_text(portable, arch)
    if arch == "sm_120":  # what an sm_120 GPU selects is what its twin runs on the H200
        assert tile == _tile_text(specs.get("tree_verify", "portable_99k"), "sm_90")
        assert geometry.tree_verify(1, 1, 0, budget=geometry.smem_budget(portable, arch))["prefetch"] == 1
    text = f"{'; '.join(ops_text)}. tree_verify portable's tile: {tile}."
    request.node.user_properties.append(("arch_runs", {"arch": arch, "text": text}))
