# tidemark: `make run` for a first pipeline on generated data, `make test` for the suite.
PYTHON ?= python3
UV_VERSION := 0.13.9
UV := .uv/bin/uv
VENV := .venv
export UV_PROJECT_ENVIRONMENT := $(VENV)
TM := $(VENV)/bin/tidemark
DEMO := demo

.PHONY: install run test test-unit test-integration lint typecheck bench chromium clean

$(UV):
	$(PYTHON) -m venv .uv
	.uv/bin/pip install --quiet uv==$(UV_VERSION)

$(VENV)/.installed: $(UV) pyproject.toml uv.lock setup.py src/tidemark/checkpoint/_fastwalk.c
	$(UV) sync --frozen --quiet
	# Bytecode for tidemark's own modules too (uv compiles site-packages): CLI startup 0.75 s -> 0.3 s here.
	$(VENV)/bin/python -m compileall -q src >/dev/null
	touch $@

install: $(VENV)/.installed

# Creates the venv, writes an example config and generated events, runs the pipeline, prints where the output is.
run: install
	rm -rf $(DEMO)
	$(TM) init $(DEMO)
	$(TM) run $(DEMO)/tidemark.toml --available-now

# Headless Chromium renders the HTML report in the report tests (Debian package).
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

lint: install
	$(VENV)/bin/ruff check src tests benchmarks setup.py
	$(VENV)/bin/ruff format --check src tests benchmarks setup.py
	$(VENV)/bin/mypy

test: install chromium lint
	$(VENV)/bin/pytest -q -p no:cacheprovider --timeout=600

test-unit: install
	$(VENV)/bin/pytest -q tests/unit

bench: install
	@echo "benchmarks are run one by one: see BENCHMARKS.md"

clean:
	rm -rf $(VENV) .uv $(DEMO) .pytest_cache .mypy_cache .ruff_cache
