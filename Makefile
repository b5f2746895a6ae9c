# The two entry points of the README. Both set everything up first (tools/setup.sh is idempotent).
PYTEST = .venv/bin/python -m pytest
JOBS ?= auto

.PHONY: setup conformance test perf bench-report lint format corpus fixtures limits engine-kernels clean kdtr-coverage
setup:
	@tools/setup.sh

# The main job: the conformance suite and its report (reports/conformance.md, .json). PROFILE=quick (the default:
# a few minutes, reduced budgets) or ci (the full ones, as make test, CI and the GPU job run; harness/profiles.py).
# HYPOTHESIS_PROFILE or CI in the environment choose as they do for pytest.
PROFILE ?= $(or $(HYPOTHESIS_PROFILE),$(if $(CI),ci,quick))
conformance: setup
	@echo "conformance: pytest conformance, profile $(PROFILE), $(JOBS) workers -> reports/conformance.md"
	HYPOTHESIS_PROFILE=$(PROFILE) $(PYTEST) conformance -n $(JOBS) $(ARGS)

# The whole test suite, as CI runs it: meta tests, conformance, compile-only kernel checks, perf smoke,
# the fuzz smoke runs, then the KDTR reader branch-coverage gate. Any failing or missing tool is an error
# (KDTREE_REQUIRE_TOOLS=1). The full hypothesis budgets (profile ci) unless HYPOTHESIS_PROFILE says otherwise.
test: setup
	HYPOTHESIS_PROFILE=$(or $(HYPOTHESIS_PROFILE),ci) KDTREE_REQUIRE_TOOLS=1 $(PYTEST) -n $(JOBS) $(ARGS)
	.venv/bin/python -m kdtr.coverage_gate

# Both outcomes of every branch of both KDTR readers under the KDTR tests (reports/kdtr-coverage.txt).
kdtr-coverage: setup
	.venv/bin/python -m kdtr.coverage_gate

# Benchmarks: no xdist (pytest-benchmark turns itself off under it); without a GPU only the CPU cases run.
# On a GPU, ARGS="--perf-stage build" etc. keeps each run within 10 minutes (README, Benchmarks).
perf: setup
	$(PYTEST) perf --benchmark-json=reports/perf.json $(ARGS)
	.venv/bin/python -m tools.bench_report reports/perf.json --out reports/perf-report

# The benchmark report from any benchmark JSON files: make bench-report JSON="a.json b.json" OUT=docs
bench-report:
	.venv/bin/python -m tools.bench_report $(or $(JSON),reports/perf.json) --out $(or $(OUT),docs)

# Lint, format check and type check (ruff and mypy, configured in pyproject.toml); `make format` rewrites.
lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

corpus:
	.venv/bin/python -m kdtr.gen_corpus

fixtures:
	.venv/bin/python -m harness.gen_fixtures

# The kernels' limits header, generated from contract/limits.py.
limits:
	.venv/bin/python -m contract.gen_limits_header

# The engine's nvcc build list, generated from kernels_cu/specs.py.
engine-kernels:
	.venv/bin/python -m kernels_cu.gen_engine_kernels

clean:
	rm -rf build .venv .pytest_cache .hypothesis
