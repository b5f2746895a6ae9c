"""The engine takes its limits from the generated header (kernels_cu/contract_limits.cuh), never a copy."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEADER = ROOT / "engine" / "include" / "kdtree" / "contract.hpp"


def test_engine_limits_come_from_the_generated_header():
    text = HEADER.read_text()
    assert '#include "contract_limits.cuh"' in text
    for m in re.finditer(r"constexpr int64_t (k\w+) = ([^;]+);", text):
        name, value = m.groups()
        assert not value.strip().isdigit(), f"{name} = {value} restates a limit: use the KDTR_ macro"


def test_no_engine_source_restates_a_limit():
    for path in (ROOT / "engine").rglob("*.[ch]pp"):
        for line in path.read_text().splitlines():
            assert not line.strip().startswith("#define CONTRACT_MAX_"), f"{path.name}: {line}"
