# `make run`, `make check` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A second environment for the mcp 2.x SDK (tests/test_mcp_sdk.py runs it as a client):
# requirements-dev.txt pins mcp 1.x, and one environment holds only one of them.
MCP2_VENV := $(VENV)/mcp2

.PHONY: run check test bench clean system-packages vendor test-assets docker docker-test screenshots

$(BIN)/python:
	@echo "Creating $(VENV)/ (a virtual environment of $$($(PYTHON) --version 2>&1), once)"
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: requirements.txt | $(BIN)/python
	@echo "Installing into $(VENV)/ with pip (on the first run, and after requirements.txt changes): $$(paste -sd' ' requirements.txt)"
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar off -r requirements.txt
	touch $@

$(VENV)/.dev: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

$(MCP2_VENV)/bin/python: | $(BIN)/python
	$(PYTHON) -m venv $(MCP2_VENV)

$(MCP2_VENV)/.installed: requirements-mcp2.txt | $(MCP2_VENV)/bin/python
	$(MCP2_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-mcp2.txt
	touch $@

run: $(VENV)/.runtime
	@[ -d totem/__pycache__ ] || echo "Compiling Totem's modules (once)"
	@$(BIN)/python -m compileall -q totem >/dev/null
	$(BIN)/python totem.py

# Debian packages the tests use: ripgrep (grep's fast path; the Python fallback is tested too),
# chromium-headless-shell (Chromium without the browser's windows: the browser tests drive it
# with Playwright), dash and bash (the shells that
# tests/test_shell_differential.py runs command lines under), and bubblewrap (the sandbox's
# mounts and namespaces; tests/test_sandbox.py tries it and Landlock alone).
system-packages:
	@command -v bwrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; }
	@command -v rg >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq ripgrep >/dev/null; }
	@command -v dash >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq dash >/dev/null; }
	@command -v bash >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq bash >/dev/null; }
	@command -v chromium-headless-shell >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null; }

# Lint and type-check (configured in pyproject.toml): ruff over the tree, mypy over the package.
check: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/mypy totem

# The suite runs in TEST_WORKERS processes (pytest-xdist; one more than the machine's processors,
# 3 to 5: the browser tests and the servers they start wait a good part of their time, and with
# one worker per processor these stood idle a tenth of the run; with one more, 3 %: on two
# processors a run took 342 s against 358 s, and 375 s against 422 s at a slower moment),
# every warning an error (unclosed sockets and files, unawaited coroutines) and tracebacks on a
# hang. Its event loops keep asyncio's debug checks (a loop called from another thread, a
# callback that blocks) without its traceback of every callback (tests/conftest.py CheckedLoop);
# the servers it starts as processes run as a person runs them. Not the whole of -X dev: its
# checking memory allocator made the suite a sixth slower and found nothing the rest does not.
# Bytecode is kept (some machines set PYTHONDONTWRITEBYTECODE): each test process and each
# server it starts would otherwise compile every module again. TEST_WORKERS=0 runs in one process.
# --dist loadgroup: a test marked xdist_group runs on one worker with the rest of its group (each
# browser test module is one: tests/conftest.py). Not with -d, which is --dist load and wins.
# Temporary folders go on /dev/shm when it is a RAM disk with 2 GB free: the tests make and remove
# thousands of git repositories, databases and small files, and a disk's journal of them was a
# fifth of those tests' time. TEST_TMPDIR= (empty) keeps the system's.
TEST_TMPDIR ?= $(shell d=/dev/shm; [ -d $$d ] && [ -w $$d ] && [ "$$(df -Pk $$d 2>/dev/null | awk 'NR==2 {print ($$4 > 2097152)}')" = 1 ] && echo $$d)
TEST_WORKERS ?= $(shell n=$$(( $$(nproc 2>/dev/null || echo 2) + 1 )); [ $$n -gt 5 ] && n=5; [ $$n -lt 3 ] && n=3; echo $$n)
TEST_PYTHON := $(BIN)/python -X faulthandler -W error
test: $(VENV)/.dev $(MCP2_VENV)/.installed system-packages
	@$(BIN)/python -m compileall -q totem >/dev/null
	PYTHONDONTWRITEBYTECODE= $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR)) $(TEST_PYTHON) -m pytest -q \
		$(if $(filter-out 0,$(TEST_WORKERS)),--dist loadgroup --tx '$(TEST_WORKERS)*popen//python=$(TEST_PYTHON)') tests

# The README's screenshots (screenshots/gallery-*.png), taken by the browser tests.
screenshots: $(VENV)/.dev system-packages
	TOTEM_GALLERY=1 $(BIN)/python -m pytest -q tests/ui/test_gallery.py

bench: $(VENV)/.runtime
	$(BIN)/python bench/run.py

# Refresh the browser libraries under static/vendor/ (pinned in scripts/vendor.py) from npm.
vendor:
	python3 scripts/vendor.py

# Refresh the browser tests' own files under tests/assets/ (axe-core, the CommonMark examples;
# pinned in scripts/test_assets.py).
test-assets:
	python3 scripts/test_assets.py

clean:
	rm -rf $(VENV) .pytest_cache

# The container image (README: "Run in a container"), with Podman when it is installed, else
# Docker. DOCKER_BASE=IMAGE builds on another base than python:3.12-slim.
CONTAINER ?= $(if $(shell command -v podman 2>/dev/null),podman,docker)
DOCKER_IMAGE ?= totem
DOCKER_BASE ?=

docker:
	$(CONTAINER) build $(if $(filter podman,$(CONTAINER)),--format docker) \
		$(if $(DOCKER_BASE),--build-arg BASE=$(DOCKER_BASE)) -t $(DOCKER_IMAGE) .

# Builds the image and checks it in containers (Podman, as root; a few minutes). Without
# DOCKER_BASE it builds on a Debian base made here with debootstrap, kept between runs.
docker-test:
	$(PYTHON) scripts/docker_test.py $(if $(DOCKER_BASE),--base $(DOCKER_BASE)) $(DOCKER_TEST_FLAGS)
