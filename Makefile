# The two commands a newcomer needs: `make demo` and `make test` (see README.md).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: demo test lint types bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed  ## beat + worker on SQLite and a server-less broker, example tasks firing
	$(PY) -m examples.demo

test: $(VENV)/.installed  ## the whole test suite (PostgreSQL/MariaDB/Redis/RabbitMQ tests skip if absent)
	$(PY) -m pytest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

types: $(VENV)/.installed
	$(VENV)/bin/mypy

bench: $(VENV)/.installed  ## timers, the CronTask guard, beat at 1k..1M rows (needs PostgreSQL, Redis)
	$(PY) benchmarks/timers.py
	$(PY) benchmarks/guard.py
	$(PY) benchmarks/beat.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache var
