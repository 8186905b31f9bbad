# The README's two commands: `make demo` and `make test`. Both bootstrap .venv from nothing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo demo-crash test test-public chromium npm screenshot lint typecheck unit bench bench-versus soak clean

BASE   := $(VENV)/.base

# Roost itself (what `make demo` needs), then the tools of `make test` (linters, Playwright, ...).
$(BASE): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(BASE)

# The OpenAI Agents SDK without its own requirements (pyproject.toml, the openai-agents extra: it
# declares websockets<17, Roost pins 17); the dev extra has the others.
OPENAI_AGENTS := openai-agents==0.24.0

$(STAMP): $(BASE)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps '$(OPENAI_AGENTS)'
	touch $(STAMP)

demo: $(BASE)
	$(BIN)/python -m roost.examples.agent_demo

demo-crash: $(BASE)
	$(BIN)/python -m roost.examples.demo

# ruff, then the layer contracts of pyproject.toml ([tool.importlinter]): a breach or a cycle fails.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The browser test drives Debian's Chromium (Playwright's own browser download is not used).
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
chromium:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends chromium; }

# The Node tests (Cloudflare's clients, the npm package) get Node 22 from the npm registry with npm
# (tests/support.py), so npm is installed here if missing. Under `make test` a missing npm, Node or
# network fails them instead of skipping them; `make test ROOST_REQUIRE_NODE=0` skips them then.
ROOST_REQUIRE_NODE ?= 1
npm:
	@command -v npm >/dev/null 2>&1 || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends npm; }

unit: $(STAMP) chromium npm
	ROOST_REQUIRE_NODE=$(ROOST_REQUIRE_NODE) PYTHONASYNCIODEBUG=1 $(BIN)/python -m pytest -q

# The whole suite again on the public path: the fast paths on private internals switched off
# (ROOST_FAST_PATHS=0; docs/design.md, "Fast paths"). .ci/run runs it after `make test`.
test-public: $(STAMP) chromium npm
	ROOST_REQUIRE_NODE=$(ROOST_REQUIRE_NODE) ROOST_FAST_PATHS=0 PYTHONASYNCIODEBUG=1 $(BIN)/python -m pytest -q

screenshot: $(STAMP) chromium
	ROOST_SCREENSHOT=docs/demo-page.png $(BIN)/python -m pytest -q tests/test_browser.py -k flow

test: lint typecheck unit

# The suite on the other supported Pythons (3.12, 3.13), each in its own venv: everything but the
# browser test and the long process tests (marker `slow`), which `make test` runs on the default Python.
PYENV_ROOT ?= $(HOME)/.pyenv
python-%: FORCE
	@py=$$(ls -d $(PYENV_ROOT)/versions/$*.*/bin/python$* 2>/dev/null | tail -1); \
	test -n "$$py" || py=$$(command -v python$*); \
	test -n "$$py" || { echo "no Python $* (pyenv or PATH)"; exit 1; }; \
	test -x .venv-$*/bin/python || $$py -m venv .venv-$*; \
	.venv-$*/bin/python -m pip install --quiet --upgrade pip; \
	.venv-$*/bin/python -m pip install --quiet -e '.[dev]'; \
	.venv-$*/bin/python -m pip install --quiet --no-deps '$(OPENAI_AGENTS)'; \
	PYTHONASYNCIODEBUG=1 .venv-$*/bin/python -m pytest -q -m "not slow" --ignore tests/test_browser.py

bench: $(STAMP)
	$(BIN)/python -m bench

# Durable RPC of this checkout against another commit, both served at once (bench/versus.py).
VERSUS_BASE ?= 14f9b97
bench-versus: $(STAMP)
	$(BIN)/python -m bench.versus --base $(VERSUS_BASE)

# Ten minutes of chaos (docs/security.md); a 60-second smoke of it runs in `make test`.
soak: $(STAMP)
	$(BIN)/python -m tests.chaos --seconds 600

clean:
	rm -rf $(VENV) .venv-3.* .mypy_cache .ruff_cache .pytest_cache *.egg-info

FORCE:
