# Two commands matter: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
MEMBERS := contracts runtime launcher ledger gateway agent voice inner-plane pollers openai-standin
EDITABLES := $(foreach m,$(MEMBERS),$(if $(wildcard services/$(m)/pyproject.toml),-e services/$(m)))

.PHONY: install run test lint typecheck bench clean

$(BIN)/.installed: requirements-dev.txt constraints.txt $(wildcard services/*/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt $(EDITABLES) -r requirements-dev.txt
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/python -m delegate.launcher

test: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check .

# strict on contracts and runtime, the default rules plus a few strict flags on the services
typecheck: install
	$(BIN)/mypy services/*/src

bench: install
	$(BIN)/python bench/ledger.py

clean:
	rm -rf $(VENV) runtime-data test-output
