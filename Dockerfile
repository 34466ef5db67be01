# The deerflow-temporal worker image (docker-compose.yml's `worker` and `sandbox` services).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEERFLOW_HOME=/data

WORKDIR /app

# Sources are copied by name (not `COPY . .`) so a local .venv, .git or .deerflow never ends up
# in the image, with or without a .dockerignore.
COPY pyproject.toml README.md ./
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

# compileall: PYTHONDONTWRITEBYTECODE keeps the runtime from caching bytecode, and the sandbox's
# bootstrap (sandbox/bootstrap.py) starts once per python_repl_tool call.
RUN pip install . \
    && python -m compileall -q /app \
    && useradd --create-home --uid 10001 deerflow \
    && mkdir -p /data \
    && chown deerflow:deerflow /data

# Unprivileged by default: the main worker holds the keys and never runs model-written code.
# That code runs only on the `sandbox` service (root in its container with the few capabilities
# namespaces need, see docker-compose.yml); a worker that cannot contain it refuses it.
USER deerflow

CMD ["python", "worker.py"]
