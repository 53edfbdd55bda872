# Observatory: two commands on a fresh machine.
#   make run            trainer + web + ingest + celery on embedded defaults (SQLite, a local Redis found or started)
#   make run RUN=new    the same, but a fresh demo run instead of resuming the latest one
#   make test           the test suite (real Redis, real database, real browser when Chromium is installed), in
#                       parallel workers
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The stamp names the requirement files' hash, so editing them reinstalls on the next command.
REQ_HASH := $(shell cat requirements.txt requirements-dev.txt 2>/dev/null | sha1sum | cut -c1-12)
STAMP_RUN  := $(VENV)/.stamp-run-$(REQ_HASH)
STAMP_DEV  := $(VENV)/.stamp-dev-$(REQ_HASH)

.PHONY: run test bench clean-var

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP_RUN): $(PY) requirements.txt
	@echo "installing runtime requirements into $(VENV) (first time: ~1-2 minutes)..."
	$(PY) -m pip install --progress-bar on -r requirements.txt
	@touch $@

$(STAMP_DEV): $(STAMP_RUN) requirements-dev.txt
	$(PY) -m pip install --progress-bar on -r requirements-dev.txt
	@touch $@

run: $(STAMP_RUN)
	$(PY) deploy/run_local.py $(if $(RUN),--run $(RUN),)

# Independent test files run in parallel worker processes (pytest-xdist), each on its own Redis database, its own
# test database and its own ports; `make test PYTEST_WORKERS=` runs them all in one process. --no-loadscope-reorder
# keeps tests/conftest.py's order (longest files first, tests/file_durations.json): xdist's own order (most tests
# first) started the few-test, long files (benches, trainer runs) last, each then running alone at the end.
PYTEST_WORKERS ?= -n 4 --dist loadfile --no-loadscope-reorder

test: $(STAMP_DEV)
	$(PY) -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

bench: $(STAMP_DEV)
	$(PY) bench/moe.py --json

clean-var:
	rm -rf var/
