# Tessera — one entry point for setup, the demo, the tests and the benchmarks.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo simulate test lint unit infra-up infra-down infra-status bench chaos clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

## setup: virtual environment with Tessera and its dev tools
setup: $(STAMP)

## infra-up / infra-down / infra-status: native PostgreSQL and Kafka under .local/
infra-up: setup
	$(BIN)/tessera infra up
infra-down:
	infra/down.sh
infra-status:
	infra/kafka.sh status; infra/postgres.sh status

## demo: set everything up and run the main job: three teams' queues, a gang and an elastic job on a busy
##       2% sample of the openb cluster, live through Kafka and PostgreSQL (about 3 minutes),
##       then the same jobs simulated under FIFO and Tessera
demo: infra-up
	$(BIN)/tessera demo

## simulate: FGD vs BestFit vs Tessera on the openb trace with the offline simulator (3 seeds)
simulate: setup
	$(BIN)/tessera simulate --policy bestfit,fgd,tessera --seeds 42-44 --out out/simulate

## lint: ruff and mypy (strict)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

## test: lint, then every test against real Kafka and PostgreSQL (started here if needed)
test: infra-up lint
	$(BIN)/python -m pytest -q

## unit: only the pure tests (no servers)
unit: setup
	$(BIN)/python -m pytest -q tests/unit

## bench: the benchmarks (prints tables and one JSON line each)
bench: infra-up
	$(BIN)/python loadtests/bench_policy.py
	$(BIN)/python loadtests/bench_eventstore.py
	$(BIN)/python loadtests/bench_pipeline.py
	$(BIN)/python loadtests/bench_cycle.py
	$(BIN)/python loadtests/bench_worker_cycle.py

## chaos: kill services and crash the servers at random while jobs flow, then check the log (2 minutes)
chaos: infra-up
	$(BIN)/python loadtests/chaos.py --seconds 120

clean:
	rm -rf out .pytest_cache .mypy_cache .ruff_cache
