# stampede: `make test` sets up a fresh machine and runs every check.
SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test check lint typecheck pytest redis bench chaos clean demo docs

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# redis-server and redis-cli must exist: the test harness starts its own servers.
redis:
	@if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then \
		exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing redis-server with apt-get"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	else \
		echo "redis-server and redis-cli are needed by the tests." >&2; \
		echo "Install them (Debian/Ubuntu: sudo apt-get install redis-server;" >&2; \
		echo "macOS: brew install redis), or set STAMPEDE_TEST_REDIS=docker." >&2; \
		exit 1; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP) redis
	$(VENV)/bin/pytest -q

test: $(STAMP) redis lint typecheck pytest

bench: $(STAMP) redis
	$(PY) -m benchmarks

# `make demo`: the same set-up as `make test`, then the live demonstration.
# Options go in DEMO_ARGS, e.g. make demo DEMO_ARGS="--cluster --duration 30".
demo: $(STAMP) redis
	$(VENV)/bin/stampede demo $(DEMO_ARGS)

# `make chaos`: fault injection on local primaries and a cluster, the independent
# consistency checker and fuzzing; exit 1 on any violation. CHAOS_ARGS="--long" for more.
chaos: $(STAMP) redis
	$(PY) -m stampede.chaos $(CHAOS_ARGS)

# The documentation site; tests/test_docs.py runs the same strict build in `make test`.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
