# The two commands of the README: `make demo` and `make test`. Both set up what is missing first.
SHELL := /bin/bash
PY := .venv/bin/python

.PHONY: setup demo test unit lint binaries clean

setup:
	bash hack/setup.sh

binaries:
	bash hack/build-binaries.sh

demo: setup
	$(PY) -m hack.demo $(ARGS)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

unit: setup
	$(PY) -m pytest tests/unit -q -rs

test: lint
	$(PY) -m pytest -v -rs --durations=15 $(ARGS)

clean:
	rm -rf .venv _out .mypy_cache .ruff_cache .pytest_cache
