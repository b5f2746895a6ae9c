"""Is the machine code of an op's registered builds the same as at another revision? Each spec of the op is built by
NVRTC for every arch it targets, in this tree and in a temporary worktree of the other revision, and the SASS
instructions (cuobjdump -sass, without addresses and line information) are compared. A change whose default build
is unchanged instruction for instruction keeps the GPU certification of that revision (no GPU needed here).

  python -m lab.sass_identity --before REV [--ops draft_topk,tree_accept]   # exit 1 on any difference
  python -m lab.sass_identity --before REV --before-defines TV90_A,TV90_B --ops tree_verify

With --before-defines, REV's builds get those defines (a design raced there with `--design x=TV90_A,TV90_B`): a
change that makes the design the default must give the default the design build's machine code, so the race's times
and bits are the new default's.

Needs cuobjdump (the CUDA toolkit, or the nvidia-cuda-cuobjdump wheel's bin/ on PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
_INSTRUCTION = r"/\*[0-9a-f]{4,6}\*/"  # an instruction's address comment (4-6 hex digits: kernels past 64 KB)

# Run inside a tree: every spec of the ops, every arch it targets -> its SASS instructions (without the addresses
# argv[3] matches), as JSON on stdout.
_DUMP = r"""
import json, re, subprocess, sys, tempfile, os
from kernels_cu import specs, runtime
out = {}
defines = dict.fromkeys(filter(None, sys.argv[4].split(",")), "1")
for op in sys.argv[1].split(","):
    for spec in specs.for_op(op):
        built = spec.with_defines(spec.variant + "_before", **defines) if defines else spec
        for arch in spec.archs:
            cubin = runtime.compile_kernel(built, arch).cubin
            with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
                f.write(cubin)
            try:
                sass = subprocess.run([sys.argv[2], "-sass", f.name], capture_output=True, text=True, check=True).stdout
            finally:
                os.unlink(f.name)
            out[f"{spec.name}@{arch}"] = [re.sub(sys.argv[3], "", l).strip() for l in sass.splitlines()
                                          if re.search(sys.argv[3], l)]
print(json.dumps(out))
"""


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    import nvidia.cu13  # the CUDA 13 wheels' layout (nvidia-cuda-cuobjdump)

    for base in nvidia.cu13.__path__:
        cand = pathlib.Path(base) / "bin" / "cuobjdump"
        if cand.exists():
            return str(cand)
    raise SystemExit("sass_identity: no cuobjdump on PATH (install the CUDA toolkit or nvidia-cuda-cuobjdump)")


def dump(tree: pathlib.Path, ops: str, tool: str, cache: str, defines: str = "") -> dict[str, list[str]]:
    """{spec@arch: SASS instructions} of every build of `ops` in `tree` (with `defines`, comma-separated, added)."""
    env = {**os.environ, "KDTREE_CACHE_DIR": cache, "PYTHONPATH": str(tree)}
    r = subprocess.run(
        [sys.executable, "-c", _DUMP, ops, tool, _INSTRUCTION, defines],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if r.returncode:
        raise SystemExit(f"sass_identity: building in {tree} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the revision to compare with")
    ap.add_argument("--ops", default="draft_topk", help="comma list of op slugs")
    ap.add_argument("--before-defines", default="", help="comma list of defines for REV's builds (a raced design)")
    a = ap.parse_args(argv)
    tool = cuobjdump()
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = pathlib.Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old_tree), a.before], cwd=ROOT, check=True)
        try:
            before = dump(old_tree, a.ops, tool, str(pathlib.Path(tmp) / "cache-before"), a.before_defines)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, check=True)
        now = dump(ROOT, a.ops, tool, str(pathlib.Path(tmp) / "cache-now"))
    differ = 0
    for name in sorted(set(before) | set(now)):
        if name not in before or name not in now:
            print(f"{name}: only {'now' if name in now else 'before'}")
            differ += 1
        elif before[name] != now[name]:
            print(f"{name}: DIFFERENT ({len(before[name])} -> {len(now[name])} instructions)")
            differ += 1
        else:
            print(f"{name}: identical ({len(now[name])} instructions)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
