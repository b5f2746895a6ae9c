"""The engine's nvcc build comes from the kernel build specs (spec/engine.md EN.5.1): the generated build
list is current, every NVRTC option has an nvcc spelling, the built engine holds exactly the specs' variants,
and its launchers take the geometry from the kernels' headers rather than restating it."""

import pathlib
import re

import pytest

from harness import engine, tools
from kernels_cu import gen_engine_kernels as gen
from kernels_cu import specs

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_build_list_is_current_with_the_specs():
    assert gen.OUT.read_text() == gen.render(), "engine/cuda/kernel_specs.cmake is stale: run `make engine-kernels`"


def test_nvcc_flags_follow_the_nvrtc_options():
    tb = specs.get("tree_build", "heap_smem")
    assert "--fmad=false" in gen.nvcc_options(tb)  # its float64 scores need the reference's operation order
    assert "-std=c++17" in gen.nvcc_options(specs.get("tree_verify", "portable"))
    with pytest.raises(ValueError, match="no nvcc spelling"):
        gen._flag("some_new_option", True)
    assert gen.gencode("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"


def test_engine_compiles_every_variant_of_the_specs(request):
    """The CUDA backend compiled in CI (nvcc needs no GPU): `kdtree-engine variants` lists the specs' variants."""
    try:
        have = engine.cuda_variants()
    except tools.ToolMissing as e:
        tools.missing(request.config, str(e))
    if not have:
        why = "kdtree-engine was built without nvcc (tools/setup.sh says why)"
        tools.missing(request.config, why)
    assert have == [(s.slug, s.variant) for s in specs.engine_specs()]


def test_launchers_read_the_geometry_headers():
    src = (ROOT / "engine" / "src" / "cuda" / "launch.cu").read_text()
    for h in ("tree_build.cuh", "tree_verify.cuh", "tree_accept.cuh"):
        assert f'#include "{h}"' in src
    for restated in ("kMinChunk", "kTargetCtas", "* 16 +", "6LL"):  # constants the headers own
        assert restated not in src, f"launch.cu restates the geometry ({restated!r})"


def test_tree_build_launch_rule_is_the_headers():
    """Which tree_build build a launch runs, with what geometry, is tree_build_launch() of tree_build.cuh: the engine's
    launcher calls it once and restates none of it (no policy define read, no race rule, no layout function), and
    the Python wrapper asks the same function through the geometry library."""
    src = (ROOT / "engine" / "src" / "cuda" / "launch.cu").read_text()
    body = src[src.index("void launch_tree_build(") : src.index("void launch_tree_accept(")]
    assert body.count("tree_build_launch(") == 1
    for restated in ("race_selects", "stages_lp", "select_cap(", "tree_build_smem(", "race_min_b", "lane_cached",
                     "hand_off", "\"TB_"):  # fmt: skip
        assert restated not in body, f"launch_tree_build restates the launch rule ({restated!r})"
    assert [d for d in set(re.findall(r'define\("(\w+)"\)', src)) if d.startswith("TB_")] == ["TB_VARIANT"]
    ops = (ROOT / "kernels_cu" / "tree_build_ops.py").read_text()
    assert ops.count("geometry.tree_build_launch(") == 1
    for restated in ("race_selects", "lane_cached", "hand_off", 'TB_RACE_MIN_B"]', 'TB_STAGE_LP"]'):
        assert restated not in ops, f"tree_build_ops.py restates the launch rule ({restated!r})"
