# Every target installs what it needs into .venv first (re-installed when pyproject.toml changes),
# the client package (clients/python) included, editable, with its extras.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
# the suite waits on sockets more than it computes: two workers take about half the time; each
# file runs whole in one worker (a module-scoped fixture may carry state from test to test)
TEST_WORKERS ?= 2

.PHONY: install run migrate test lint format typecheck check bench profile bench-summarizer bench-fidelity demo verify load

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e './clients/python[agents,langchain]'
	touch $(STAMP)

install: $(STAMP)

migrate: $(STAMP)
	$(BIN)/alembic upgrade head

run: migrate
	$(BIN)/python -m api --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench-summarizer: $(STAMP)
	$(BIN)/python -m scripts.bench.summarizer

bench-fidelity: $(STAMP)
	$(BIN)/python -m scripts.bench.fidelity

demo: $(STAMP)
	$(BIN)/python -m scripts.demo --base-url http://$(HOST):$(PORT)

verify: $(STAMP)
	$(BIN)/python -m scripts.verify

load: $(STAMP)
	$(BIN)/python -m scripts.bench.load $(LOAD_ARGS)

# The peers are installed into their own virtualenv, never into the product's dependencies.
$(BENCH_STAMP): pyproject.toml
	test -d $(BENCH_VENV) || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/pip install --quiet -e '.[dev]' 'openai-agents[sqlalchemy]>=0.22,<0.25' 'langchain-postgres==0.0.19' 'psycopg[binary]' 'pyinstrument==5.1.3'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m scripts.bench.run

profile: $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python -m scripts.bench.profile $(PROFILE_ARGS)
