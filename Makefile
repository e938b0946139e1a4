# agentq — the two commands of the README's quick start are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck unit notebooks browser bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	$(PY) -m pip install --quiet --no-deps 'bfcl-eval==2026.3.23' 'mpmath>=1.3'
	touch $(STAMP)

## Run the main job: replay BFCL's multi-turn agent tasks through agentq on a SQLite file.
demo: $(STAMP)
	$(PY) -m examples.bfcl_replay

## Run every check: ruff, mypy --strict, the test suite, the notebooks and the browser suite.
test: $(STAMP)
	bash scripts/ensure-chromium.sh
	$(VENV)/bin/ruff check agentq tests examples bench
	$(VENV)/bin/mypy agentq
	$(PY) -m pytest tests
	$(PY) -m pytest --nbmake notebooks -p no:randomly

lint: $(STAMP)
	$(VENV)/bin/ruff check agentq tests examples bench
	$(VENV)/bin/mypy agentq

bench: $(STAMP)
	$(PY) bench/queue.py
	$(PY) bench/workflows.py
	$(PY) bench/frames.py
	$(PY) bench/replay.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
