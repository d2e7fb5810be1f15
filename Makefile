# Two commands for a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PORT ?= 8000
HOST ?= 127.0.0.1

.PHONY: run test test-cluster install install-dev ingest lint format eval bench clean browser bubblewrap

# pip runs --quiet, so each long step says first what it is doing and roughly how long it takes.
$(VENV)/bin/activate:
	@echo "Creating the virtualenv $(VENV) and upgrading pip…"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# torch first: its pinned CPU build lies on local disk; an unpinned one pulls a multi-GB CUDA build.
$(VENV)/.installed: $(VENV)/bin/activate pyproject.toml
	@echo "Installing torch 2.13.0 (CPU build, ~200 MB from local disk; about a minute)…"
	$(PIP) install --quiet torch==2.13.0
	@echo "Installing Sparring and its dependencies (FastAPI, Gradio, Chroma, sentence-transformers,"
	@echo "litellm…; several minutes on a first install, pip prints nothing meanwhile)…"
	$(PIP) install --quiet -e .
	@echo "Dependencies installed."
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	@echo "Installing the test tools (pytest, ruff, Playwright, pgserver; a minute or two)…"
	$(PIP) install --quiet -e '.[dev]'
	touch $@

install: bubblewrap $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

ingest: install
	$(VENV)/bin/sparring ingest

# `serve` builds or refreshes the index (embedding only what changed) before it listens.
run: install
	$(VENV)/bin/sparring serve --host $(HOST) --port $(PORT)

# The UI test drives Debian's Chromium (Playwright cannot download browsers here).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver fonts-noto-cjk; \
		else \
			echo "Install Debian's chromium (sudo apt-get install chromium chromium-driver)"; exit 1; \
		fi; \
	fi

# Candidate code for coding questions runs under Debian's bubblewrap. Without it the server still
# runs, and code questions are graded on their prose (the start-up output says so).
bubblewrap:
	@if [ ! -x /usr/bin/bwrap ]; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; \
		else \
			echo "bubblewrap is missing (sudo apt-get install bubblewrap): code questions fall back to prose grading"; \
		fi; \
	fi

test: install-dev browser bubblewrap
	@test -x /usr/bin/bwrap || { echo "The sandbox escape tests need bubblewrap (sudo apt-get install bubblewrap)"; exit 1; }
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q

# The scale-out topology on loopback: PostgreSQL (pgserver wheel), `chroma run`, `sparring ingest`
# into it, two API processes (one with --workers 2); one interview across them, one process
# SIGKILLed mid-interview. `make test` runs it too (pytest collects tests/cluster).
test-cluster: install-dev
	$(PY) -m pytest -q -s tests/cluster

lint: install-dev
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: install-dev
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

eval: install
	$(VENV)/bin/sparring eval retrieval
	$(VENV)/bin/sparring eval grading

bench: install
	$(PY) benchmarks/search_latency.py
	$(PY) benchmarks/grade_latency.py

clean:
	rm -rf $(VENV) data
