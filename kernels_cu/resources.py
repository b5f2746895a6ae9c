"""What a compiled kernel asks of its GPU, read from the cubin (no GPU), and whether that fits its arch.

`read(path)` runs `cuobjdump -res-usage` on a cubin, or on an executable or object whose fat binary holds cubins
(the engine's nvcc build): per arch and entry function, the registers, the static shared memory, the stack and
the local memory. cuobjdump's SHARED column counts the shared memory the system reserves per block too
(arch_limits.cuh's smem_reserved_per_block); `static_smem` is without it.

`problems(limits, usage, threads, dynamic_smem)` checks one launch of one entry against the row of
kernels_cu/arch_limits.cuh for its arch (spec/build.md KB.1.7): registers per thread, the registers of the
block as the SM allocates them (per warp, in units of reg_alloc_unit), static and static + dynamic shared memory
per block and per SM, threads per block and per SM. A kernel that passes has room for one block on one SM.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess

_ARCH = re.compile(r"^arch = (sm_\w+)$", re.M)
_FUNCTION = re.compile(r"^\s*Function ([^:\s]+):\s*\n\s*(.+)$", re.M)
_FIELD = re.compile(r"(\w+(?:\[\d+\])?):(\d+)")


class ToolMissing(RuntimeError):
    """cuobjdump is not installed (the test extras install it: nvidia-cuda-cuobjdump)."""


@dataclasses.dataclass(frozen=True)
class Usage:
    registers: int
    shared: int  # cuobjdump's SHARED: static shared memory plus the per-block reservation
    stack: int
    local: int

    def static_smem(self, limits: dict[str, int]) -> int:
        return self.shared - limits["smem_reserved_per_block"]


def cuobjdump() -> str:
    """The cuobjdump executable: the CUDA wheels' copy (cuda.pathfinder) or one on PATH."""
    from cuda import pathfinder

    tool = pathfinder.find_nvidia_binary_utility("cuobjdump") or shutil.which("cuobjdump")
    if tool is None:
        raise ToolMissing("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    return str(tool)


def parse(text: str, arch: str | None = None) -> dict[str, dict[str, Usage]]:
    """cuobjdump -res-usage output -> {arch: {function: Usage}}. A bare cubin's output names no arch: `arch`."""
    out: dict[str, dict[str, Usage]] = {}
    # a fat binary's listing is one section per embedded cubin, each headed by its arch
    heads = list(_ARCH.finditer(text))
    sections = [(m.group(1), text[m.end() : (heads[i + 1].start() if i + 1 < len(heads) else len(text))])
                for i, m in enumerate(heads)] or [(arch, text)]  # fmt: skip
    for sec_arch, body in sections:
        if sec_arch is None:
            raise ValueError("cuobjdump names no arch for this file: pass the arch the cubin was built for")
        for m in _FUNCTION.finditer(body):
            f = {k: int(v) for k, v in _FIELD.findall(m.group(2))}
            missing = {"REG", "SHARED", "STACK", "LOCAL"} - set(f)
            if missing:
                raise ValueError(f"cuobjdump gave no {', '.join(sorted(missing))} for {m.group(1)}: {m.group(2)!r}")
            usage = Usage(f["REG"], f["SHARED"], f["STACK"], f["LOCAL"])
            if out.setdefault(sec_arch, {}).setdefault(m.group(1), usage) != usage:
                raise ValueError(f"two different {m.group(1)} for {sec_arch} in one file")
    return out


def read(path: str | os.PathLike, arch: str | None = None) -> dict[str, dict[str, Usage]]:
    """The resources of every entry function of every cubin in `path` (a cubin built for `arch`, or a binary
    with a fat binary), as parse() gives them."""
    r = subprocess.run([cuobjdump(), "-res-usage", str(pathlib.Path(path))], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"cuobjdump -res-usage {path} failed:\n{r.stderr}")
    return parse(r.stdout, arch)


def block_registers(registers: int, threads: int, limits: dict[str, int]) -> int:
    """Registers the SM allocates to a block: per warp, rounded up to the allocation unit."""
    unit = limits["reg_alloc_unit"]
    warps = -(-threads // 32)
    return warps * (-(-registers * 32 // unit) * unit)


def problems(limits: dict[str, int], usage: Usage, threads: int, dynamic_smem: int) -> list[str]:
    """Every limit of `limits` (arch_limits.cuh's row) that one block of `threads` threads with `dynamic_smem`
    bytes of dynamic shared memory exceeds; empty when one block fits one SM."""
    static = usage.static_smem(limits)
    smem = static + dynamic_smem
    regs = block_registers(usage.registers, threads, limits)
    asked = [
        ("regs_per_thread", usage.registers, "registers per thread"),
        ("regs_per_block", regs, f"registers per block ({usage.registers} x {threads} threads, allocated per warp)"),
        ("regs_per_sm", regs, "registers on one SM"),
        ("smem_static_max", static, "bytes of static shared memory"),
        ("smem_per_block_optin", smem, f"bytes of shared memory per block ({static} static + {dynamic_smem} dynamic)"),
        (
            "smem_per_sm",
            smem + limits["smem_reserved_per_block"],
            "bytes of shared memory on one SM (with the system's reservation)",
        ),
        ("threads_per_block", threads, "threads per block"),
        ("threads_per_sm", threads, "threads on one SM"),
    ]
    return [f"{value} {what} > {name} {limits[name]}" for name, value, what in asked if value > limits[name]]
