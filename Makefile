# The two commands a newcomer needs: `make demo` and `make test` (see README.md).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: demo test lint types docs extras bench bench-compare clean

# The demo needs the package alone (SQLite and the filesystem broker come with it); the
# developer tool chain is the PEP 735 group `dev`, which pip installs from 25.1 on.
$(VENV)/.demo-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade 'pip>=25.1'
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed: $(VENV)/.demo-installed
	$(PY) -m pip install -q -e . --group dev
	touch $@

demo: $(VENV)/.demo-installed  ## worker + embedded beat on SQLite and a server-less broker, five tasks firing
	$(PY) -m examples.demo

test: $(VENV)/.installed  ## the whole test suite (PostgreSQL/MariaDB/Redis/RabbitMQ tests skip if absent)
	$(PY) -m pytest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

types: $(VENV)/.installed
	$(VENV)/bin/mypy

$(VENV)/.docs-installed: $(VENV)/.installed
	$(PY) -m pip install -q --group docs
	touch $@

docs: $(VENV)/.docs-installed  ## the site in site/; fails on stale generated parts or broken links
	$(PY) docs/generate.py --check
	$(VENV)/bin/mkdocs build --strict

extras:  ## build wheel + sdist, twine check, each extra alone in a fresh venv against its service
	.ci/extras

bench: $(VENV)/.installed  ## timers, the CronTask guard, beat at 1k..1M rows (needs PostgreSQL, Redis)
	$(PY) benchmarks/timers.py
	$(PY) benchmarks/guard.py
	$(PY) benchmarks/beat.py

# The other schedulers live only in this separate venv, never in the project's dependencies.
BENCH_VENV ?= .venv-bench
BENCH_DEPS := django-celery-beat==2.9.0 Django==5.2.19 sqlalchemy-celery-beat==0.9.1 \
	celery-redbeat==2.4.2 matplotlib==3.11.2

$(BENCH_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[postgres,redis]' $(BENCH_DEPS)
	touch $@

bench-compare: $(BENCH_VENV)/.installed  ## vs django-celery-beat, sqlalchemy-celery-beat, RedBeat + a real Redis broker (PostgreSQL, Redis; ~45 min)
	$(BENCH_VENV)/bin/python benchmarks/compare.py --cronstore-sizes 100,1000,10000,100000,1000000

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache var site dist
