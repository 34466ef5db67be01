# The deerflow-temporal worker image (used by docker-compose.yml's `worker` service).
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
COPY offline ./offline
COPY cli ./cli
COPY runtime ./runtime
COPY storage ./storage
COPY prompts ./prompts
COPY worker.py starter.py ./

RUN pip install . \
    && useradd --create-home --uid 10001 deerflow \
    && mkdir -p /data \
    && chown deerflow:deerflow /data

# Unprivileged at run time: the worker runs model-written Python in its code sandbox.
USER deerflow

CMD ["python", "worker.py"]
