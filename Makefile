# Two commands matter: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
MEMBERS := contracts runtime launcher host ledger gateway agent voice inner-plane memory tasks pollers openai-standin
EDITABLES := $(foreach m,$(MEMBERS),$(if $(wildcard services/$(m)/pyproject.toml),-e services/$(m)))

.PHONY: install install-run install-embeddings run test test-split test-fast test-embeddings check-system lint lint-imports typecheck bench token token-rotate clean

# caldav's HTTP library (niquests) brings urllib3-future, whose wheel installs a .pth that copies
# itself over urllib3 at every interpreter start; requests (twilio, schemathesis) then runs on the
# fork and schemathesis breaks on its pool manager. Built from its sdist with this variable set,
# urllib3-future installs as `urllib3_future` only, beside the real urllib3 (the fork's own README,
# "Notes / Frequently Asked Questions"). tests/test_install.py checks the result.
export URLLIB3_NO_OVERRIDE := 1
export PIP_NO_BINARY := urllib3-future

# Two installs: running needs only the members and their runtime packages (`make run`);
# testing adds the tooling of requirements-dev.txt (pytest, Playwright, hypothesis, ruff, mypy).
# pip runs without -q: a first install takes a while, and its progress shows.
$(BIN)/.installed-run: constraints.txt $(wildcard services/*/pyproject.toml)
	@echo "== creating $(VENV) and installing Delegate's runtime packages (a minute on a first run)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --progress-bar on --upgrade pip
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt $(EDITABLES)
	touch $@

$(BIN)/.installed: $(BIN)/.installed-run requirements-dev.txt
	@echo "== installing the test tooling (requirements-dev.txt)"
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt -r requirements-dev.txt
	touch $@

# Memory's optional embedding ranker (CPU torch and a small model from the `embeddings` extra:
# about a minute and 1.3 GB more) is tested in its own lane; `make test` and `make run` go without.
$(BIN)/.installed-embeddings: $(BIN)/.installed services/memory/pyproject.toml
	@echo "== installing memory's embeddings extra (torch: 1.3 GB)"
	$(BIN)/python -m pip install --progress-bar on -c constraints.txt -e 'services/memory[embeddings]'
	touch $@

install-run: $(BIN)/.installed-run

# The browser tests' own npm tools (axe-core for the accessibility audit), from the npm registry
# at the versions tests/browser/axe/package-lock.json pins; the tests load them from disk.
AXE := tests/browser/axe/node_modules/axe-core/axe.min.js
$(AXE): tests/browser/axe/package.json tests/browser/axe/package-lock.json
	@echo "== installing the browser tests' npm tools (axe-core)"
	npm ci --prefix tests/browser/axe --no-audit --no-fund
	touch $@

# What `make test` and .ci/run need.
install: $(BIN)/.installed $(AXE)

install-embeddings: $(BIN)/.installed-embeddings

run: install-run
	$(BIN)/python -m delegate.launcher

# The owner token `make run` signs in with; token-rotate writes a new one (restart `make run`
# afterwards: every browser session is signed out by the change).
token: install-run
	@$(BIN)/python -m delegate.gateway token

token-rotate: install-run
	@$(BIN)/python -m delegate.gateway token --rotate

# The lanes (markers in pyproject.toml): `make test` runs everything but the embeddings lane,
# on five workers, a test file on one at a time (its module-wide System stays whole): many tests
# wait on real processes and wall-clock periods, so more workers than cores keep the two busy.
# Five since the tests fork their service processes from a preloaded interpreter
# (tests/support/forked.py: a third less CPU a run): 1,568 tests on the idle 2-core machine in
# 8:50 to 10:19 on five workers (five runs), 8:59 to 10:24 on four (11:36 on four before forking;
# five then summed 20% more file time than four, on two cores with no room for a fifth); 1,573
# in 9:02 and, from a fresh bytecode cache as CI runs, 9:38 and 9:12 on a day the machine ran
# ~40% slower.
# The run is CPU-bound: fewer CPU-seconds are what shortens it, not more workers.
# The files go longest first (tests/support/schedule.py, from tests/file-seconds.json), so the
# workers finish together; each run writes its own figures
# to test-output/file-seconds.json (and each file's CPU to file-cpu-*.json). It ends with the 25 slowest.
# A test's services share one host process, as `make run` runs them, but for those it kills,
# stops or restarts alone; `make test-split` gives every service its own process instead.
TEST_WORKERS ?= 5
PYTEST := $(BIN)/python -m pytest
FAST := not integration and not browser and not slow and not embeddings
test: install check-system
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "not embeddings" --durations=25

test-split: install check-system
	DELEGATE_TEST_PROCESSES=split $(PYTEST) -n $(TEST_WORKERS) --dist loadfile -m "not embeddings" --durations=25

# The inner loop: no process, no browser (under 2 minutes). --no-processes fails a test that
# starts one anyway, naming the mark it lacks.
test-fast: install
	$(PYTEST) -m "$(FAST)" --no-processes

test-embeddings: install-embeddings
	$(PYTEST) -m embeddings

# The system packages the tests use besides Python's: said up front when one is missing.
# chromium-headless-shell is Chromium's own headless build (its source package's), not another browser.
check-system:
	@missing=""; for tool in chromium chromium-headless-shell espeak-ng sox; do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then \
	  echo "== missing:$$missing. Install with: sudo apt-get install$$missing (Debian/Ubuntu)."; \
	  echo "   The tests that need them skip here and fail under CI."; \
	fi

lint: install
	$(BIN)/ruff check .

# The import contracts of .importlinter: layers, independent services, no cycles.
lint-imports: install
	$(BIN)/lint-imports

# strict (pyproject.toml) on every member and every test directory (issue #28); a new test
# directory is added here.
TYPED_TESTS := tests/support tests/contracts tests/ledger tests/tasks tests/voice tests/agent tests/e2e tests/host tests/compose tests/tools tests/skeletons tests/openai_standin tests/pollers tests/memory tests/inner_plane tests/runtime tests/gateway tests/browser tests/client_js tests/*.py
typecheck: install
	$(BIN)/mypy services/*/src $(TYPED_TESTS) bench

bench: install
	$(BIN)/python bench/ledger.py

clean:
	rm -rf $(VENV) runtime-data test-output
