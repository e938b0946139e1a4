# agentq — the two commands of the README's quick start are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit notebooks browser bench clean

# constraints.txt pins every package of the test environment to the versions CI last passed
# with (tests run with warnings as errors, so an unpinned upgrade could fail them).
# Refresh it with: .venv/bin/pip freeze --exclude-editable > constraints.txt
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	$(PY) -m pip install --quiet --no-deps -c constraints.txt 'bfcl-eval==2026.3.23' 'mpmath>=1.3'
	touch $(STAMP)

## Run the main job: replay BFCL's multi-turn agent tasks through agentq on a SQLite file.
demo: $(STAMP)
	$(PY) -m examples.bfcl_replay

## Run every check: ruff, mypy --strict, the test suite, the notebooks and the browser suite.
test: $(STAMP)
	bash scripts/ensure-chromium.sh
	$(VENV)/bin/ruff check agentq tests examples bench
	$(VENV)/bin/mypy agentq examples
	$(PY) -m pytest tests
	$(PY) -m pytest --nbmake notebooks

lint: $(STAMP)
	$(VENV)/bin/ruff check agentq tests examples bench
	$(VENV)/bin/mypy agentq examples

## Run the notebooks alone, or the browser suite alone.
notebooks: $(STAMP)
	$(PY) -m pytest --nbmake notebooks

browser: $(STAMP)
	bash scripts/ensure-chromium.sh
	$(PY) -m pytest tests/browser

## Benchmarks: each prints ratios against a raw baseline measured in the same run.
bench: $(STAMP)
	$(PY) -m bench.queue
	$(PY) -m bench.workflows
	$(PY) -m bench.frames
	$(PY) -m bench.replay

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
