# The two commands a newcomer needs: `make demo` and `make test` (see README.md).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: demo test test-pgbouncer test-celery-matrix lint types docs extras bench bench-compare clean

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

# Two runs: everything not marked `serial` on every core (pytest-xdist; `--dist loadgroup`
# keeps an `xdist_group` on one worker), then the `serial` tests (real-time and CPU
# assertions, many processes) alone. Both always run; either failing fails the target.
# Plain `pytest` still runs the whole suite in one process. TEST_WORKERS=1 (or 0) is one
# worker; PYTEST_ARGS goes to both runs (say, `make test PYTEST_ARGS=-x`).
TEST_WORKERS ?= auto
PYTEST_ARGS ?=

PARALLEL_RUN = $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not serial" $(PYTEST_ARGS)
SERIAL_RUN = $(PY) -m pytest -m serial $(PYTEST_ARGS)

test: $(VENV)/.installed  ## the whole test suite (PostgreSQL/MariaDB/Redis/RabbitMQ tests skip if absent)
	@status=0; \
	echo '$(PARALLEL_RUN)'; $(PARALLEL_RUN) || status=1; \
	echo '$(SERIAL_RUN)'; $(SERIAL_RUN) || status=1; \
	exit $$status

# The PostgreSQL tests again through a PgBouncer of their own (harness/pgbouncer.py), once
# per pooling mode: the store's and beat's quick tests on two xdist workers (each with its
# own PgBouncer and scratch database), then alone the `serial` and `slow` ones: beat and
# workers as processes (one beat on Redis, three replicas, the at-most-once faults).
# LISTEN cannot work through a transaction pooler (beat polls there): the wake-on-change
# tests skip in transaction mode and run in session mode (tests/store/test_pooler.py
# covers the choice).
PGBOUNCER_MODES ?= transaction session
PGBOUNCER_QUICK := tests/store tests/beat
PGBOUNCER_SLOW := tests/store tests/beat tests/e2e/test_e2e_beat.py \
	tests/e2e/test_e2e_replicas.py tests/e2e/test_at_most_once.py
# Left out (the database path is the same as the kept ones'): the RabbitMQ variant of the
# one-beat test, and the two at-most-once tests of Redis faults.
PGBOUNCER_NOT := not rabbitmq and not redis_refusing and not redis_outage

test-pgbouncer: $(VENV)/.installed  ## the PostgreSQL tests through PgBouncer, transaction and session pooling (~7 min)
	@status=0; \
	for mode in $(PGBOUNCER_MODES); do \
	  echo "== through PgBouncer, pool_mode = $$mode"; \
	  CRONSTORE_TEST_PGBOUNCER=$$mode $(PY) -m pytest -q -n 2 --dist loadgroup \
	    -m "postgres and not serial and not slow" $(PGBOUNCER_QUICK) $(PYTEST_ARGS) || status=1; \
	  CRONSTORE_TEST_PGBOUNCER=$$mode $(PY) -m pytest -q -m "postgres and (serial or slow)" \
	    -k "$(PGBOUNCER_NOT)" $(PGBOUNCER_SLOW) $(PYTEST_ARGS) || status=1; \
	done; \
	exit $$status

# The message path against every Celery minor the project supports (celery>=5.4,<6): beat's
# Dispatcher builds Celery's protocol-2 message itself, so the tests that compare it with
# Celery's own send path (and one real worker of that Celery taking it) run on each minor,
# each in a venv of its own (.venv-celery-5.X) with kombu of the same minor, the pair
# released together (5.4's is the project's kombu floor).
CELERY_MINORS ?= 5.4 5.5 5.6 5.7
MESSAGE_TESTS := tests/beat/test_dispatch_messages.py tests/beat/test_dispatch_brokers.py \
	tests/architecture/test_security.py tests/beat/test_scheduler.py \
	"tests/e2e/test_e2e_beat.py::test_beat_fires_on_time_sees_edits_and_stops_when_disabled[redis-sqlite]"

.venv-celery-%/.installed: pyproject.toml
	rm -rf .venv-celery-$*
	$(PYTHON) -m venv .venv-celery-$*
	.venv-celery-$*/bin/python -m pip install -q --upgrade 'pip>=25.1'
	.venv-celery-$*/bin/python -m pip install -q --no-compile -e . --group dev 'celery==$*.*' 'kombu==$*.*'
	echo '*' > .venv-celery-$*/.gitignore
	touch $@

test-celery-matrix: $(foreach minor,$(CELERY_MINORS),.venv-celery-$(minor)/.installed)  ## the message tests on each Celery minor (5.4 .. 5.7), side by side
	@for minor in $(CELERY_MINORS); do \
	  dir=.venv-celery-$$minor; \
	  { ( versions=$$($$dir/bin/python -c 'import celery, kombu; print(celery.__version__, kombu.__version__)'); \
	      echo "== Celery $$minor (celery, kombu: $$versions)"; \
	      case "$$versions" in "$$minor".*) ;; *) echo "not Celery $$minor"; exit 1;; esac; \
	      $$dir/bin/python -m pytest -q -p no:cacheprovider $(MESSAGE_TESTS) $(PYTEST_ARGS) \
	    ) > $$dir/matrix.log 2>&1; echo $$? > $$dir/matrix.status; } & \
	done; \
	wait; status=0; \
	for minor in $(CELERY_MINORS); do \
	  dir=.venv-celery-$$minor; cat $$dir/matrix.log; \
	  [ "$$(cat $$dir/matrix.status)" = 0 ] || { echo "== Celery $$minor: FAILED"; status=1; }; \
	done; \
	exit $$status

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
	rm -rf $(VENV) .venv-celery-* .pytest_cache .mypy_cache .ruff_cache var site dist
