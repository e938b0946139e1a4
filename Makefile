# agentq — the two commands of the README's quick start are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

# Two installs into one virtual environment, each recorded by a stamp file:
# - the demo's: agentq with its `bfcl` extra (aiosqlite, mpmath), then bfcl-eval itself with
#   --no-deps (its own requirements pull in model clients, numpy 1.26 and more; the replay
#   imports only its data files and service classes). A few tens of MB, no pandas, no pyarrow:
#   the demo writes its event export as CSV unless pyarrow is there (see
#   examples/bfcl_replay/README.md).
# - the test toolchain's, on top of the demo's: `.[test]` (JupyterLab, Playwright, mypy,
#   matplotlib, pyarrow, ...). `make test` needs both; `make demo` only the first. Either
#   command works first on a fresh machine.
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
# bench/agents.py's environment: agentq with the `bench` extra (LangGraph, DBOS and their
# dependencies, which the test environment does not pin), apart from .venv.
BENCH_VENV  := .venv-bench
BENCH_PY    := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.installed-bench

.PHONY: demo test lint typecheck unit notebooks browser bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# constraints.txt pins every package of the test environment to the versions CI last passed
# with (tests run with warnings as errors, so an unpinned upgrade could fail them); the demo's
# packages are pinned by the same file.
# Refresh it with: .venv/bin/pip freeze --exclude-editable > constraints.txt
$(DEMO_STAMP): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install --quiet --no-warn-conflicts -c constraints.txt -e '.[bfcl]'
	$(PY) -m pip install --quiet --no-deps -c constraints.txt 'bfcl-eval==2026.3.23'
	touch $(DEMO_STAMP)

$(TEST_STAMP): $(DEMO_STAMP) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet --no-warn-conflicts -c constraints.txt -e '.[bfcl,test]'
	touch $(TEST_STAMP)

# The bench environment: constraints.txt still pins what agentq and the tests share
# (pydantic, pydantic-ai-slim, aiosqlite); the extra pins the peers.
$(BENCH_PY):
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install --quiet --upgrade pip

$(BENCH_STAMP): pyproject.toml constraints.txt | $(BENCH_PY)
	$(BENCH_PY) -m pip install --quiet --no-warn-conflicts -c constraints.txt -e '.[bench]'
	touch $(BENCH_STAMP)

## Run the main job: replay BFCL's multi-turn agent tasks through agentq on a SQLite file.
demo: $(DEMO_STAMP)
	$(PY) -m examples.bfcl_replay

## Run every check: ruff, mypy --strict, the import contract (layers, no cycles), the test suite, the notebooks and the browser suite.
## The suite starts a throwaway PostgreSQL cluster of its own (PostgreSQL is installed with
## apt-get first if missing; if it cannot be, the PostgreSQL tests fail and say why).
test: $(TEST_STAMP)
	bash scripts/ensure-chromium.sh
	-$(PY) -m tests.pg_cluster --install
	$(VENV)/bin/ruff check agentq tests examples bench
	$(VENV)/bin/mypy agentq examples
	$(VENV)/bin/lint-imports
	$(PY) -m pytest tests
	$(PY) -m pytest --nbmake notebooks

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check agentq tests examples bench
	$(VENV)/bin/mypy agentq examples
	$(VENV)/bin/lint-imports

## Run the notebooks alone, or the browser suite alone.
notebooks: $(TEST_STAMP)
	$(PY) -m pytest --nbmake notebooks

browser: $(TEST_STAMP)
	bash scripts/ensure-chromium.sh
	$(PY) -m pytest tests/browser

## Benchmarks: each prints ratios against a raw baseline measured in the same run
## (bench.postgres starts a throwaway PostgreSQL cluster of its own, like the tests;
## bench.agents runs in .venv-bench, beside the peers of the `bench` extra).
bench: $(TEST_STAMP) $(BENCH_STAMP)
	$(PY) -m bench.queue
	$(PY) -m bench.rates
	$(PY) -m bench.rates_shared
	$(PY) -m bench.memory
	$(PY) -m bench.workflows
	$(PY) -m bench.store_verbs
	$(PY) -m bench.groups
	$(PY) -m bench.calls
	$(PY) -m bench.frames
	$(PY) -m bench.replay
	$(PY) -m bench.postgres
	$(PY) -m bench.tracing
	$(PY) -m bench.scale
	$(PY) -m bench.cli
	$(PY) -m bench.retention
	$(BENCH_PY) -m bench.agents

clean:
	rm -rf $(VENV) $(BENCH_VENV) .pytest_cache .mypy_cache .ruff_cache
