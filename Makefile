# The two entry points of the README. Both set everything up first (tools/setup.sh is idempotent).
PYTEST = .venv/bin/python -m pytest
JOBS ?= auto

.PHONY: setup conformance test perf lint format corpus fixtures clean kdtr-coverage
setup:
	@tools/setup.sh

# The main job: the conformance suite and its report (reports/conformance.md, .json).
conformance: setup
	$(PYTEST) conformance -n $(JOBS) $(ARGS)

# The whole test suite, as CI runs it: meta tests, conformance, compile-only kernel checks, perf smoke,
# the fuzz smoke runs, then the KDTR reader branch-coverage gate. Any failing or missing tool is an error
# (KDTR_REQUIRE_TOOLS=1).
test: setup
	KDTR_REQUIRE_TOOLS=1 $(PYTEST) -n $(JOBS) $(ARGS)
	.venv/bin/python tools/kdtr_coverage.py

# Both outcomes of every branch of both KDTR readers under the KDTR tests (reports/kdtr-coverage.txt).
kdtr-coverage: setup
	.venv/bin/python tools/kdtr_coverage.py

# Benchmarks need a GPU and no xdist (pytest-benchmark turns itself off under xdist).
perf: setup
	$(PYTEST) perf -p no:xdist --benchmark-enable --benchmark-json=reports/perf.json $(ARGS)

# Lint and format check (ruff, configured in pyproject.toml); `make format` rewrites.
lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

corpus:
	.venv/bin/python tools/gen_kdtr_corpus.py

fixtures:
	.venv/bin/python tools/gen_fixtures.py

clean:
	rm -rf build .venv .pytest_cache .hypothesis
