"""Real processes for end-to-end tests and benchmarks: the bundled dev server and worker.py.

Used where the bugs live in the gaps between processes: crash recovery, restarts, and the
public contract through the real ``temporal`` CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from temporalio.client import Client

from offline.providers import without_provider_settings
from runtime.embedded import DEV_SERVER_STORAGE_FLAGS, free_port, has_worker

REPO_DIR = Path(__file__).resolve().parent.parent
TEMPORAL_CLI = str(Path(sysconfig.get_path("scripts")) / "temporal")


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class DevServer:
    """``temporal server start-dev`` on free ports with a database file, so it can be restarted.

    It keeps that file as the embedded default does (``DEV_SERVER_STORAGE_FLAGS``), so tests and
    benches time what users run; ``extra_args`` come after and may override those pragmas.
    """

    def __init__(self, db_path: Path, extra_args: list[str] | None = None) -> None:
        self.db_path = db_path
        self.port = free_port()
        self.ui_port = free_port()
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> DevServer:
        self.process = subprocess.Popen(
            [TEMPORAL_CLI, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(self.port),
             "--ui-port", str(self.ui_port), "--db-filename", str(self.db_path), *DEV_SERVER_STORAGE_FLAGS,
             "--log-level", "error", *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        wait_for_port(self.port)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=30)
        self.process = None

    def cli(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run the real ``temporal`` CLI against this server."""
        return subprocess.run([TEMPORAL_CLI, *args, "--address", self.address], capture_output=True, text=True,
                              timeout=timeout, check=False)


class WorkerProcess:
    """``python worker.py`` in its own process group (with its own offline providers)."""

    def __init__(self, address: str, log_path: Path, env: dict[str, str] | None = None,
                 repo: Path = REPO_DIR) -> None:
        self.address = address
        self.repo = repo  # the checkout whose code the worker runs (another build in deploy tests)
        self.log_path = log_path
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        # No .env either (unless the test gives one): a developer's real keys there must not reach it.
        env = {**without_provider_settings(os.environ), "DEERFLOW_ENV_FILE": os.devnull,
               "TEMPORAL_ADDRESS": self.address, **self.env}
        log = self.log_path.open("ab")
        self.process = subprocess.Popen([sys.executable, str(self.repo / "worker.py")], cwd=self.repo, env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def kill(self) -> None:
        """SIGKILL the whole group: no graceful shutdown, like a crashed machine."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


async def wait_for_worker(client: Client, log: Path, timeout: float = 60) -> None:
    """Until a worker polls the task queue; on time-out the worker's log says why it did not."""
    deadline = time.monotonic() + timeout
    while not await has_worker(client):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else f"no worker log at {log}"
        await asyncio.sleep(0.2)


async def start_worker(dev_server: DevServer, client: Client, log: Path, repo: Path = REPO_DIR,
                       **env: str) -> WorkerProcess:
    """A real ``worker.py`` process of the checkout ``repo`` on ``dev_server``, returned once it polls."""
    worker = WorkerProcess(dev_server.address, log, env=env, repo=repo).start()
    await wait_for_worker(client, log)
    return worker


def query_status(dev_server: DevServer, workflow_id: str) -> dict:
    """The ``status`` query through the real ``temporal`` CLI, as an operator would read it."""
    result = dev_server.cli("workflow", "query", "--workflow-id", workflow_id, "--name", "status", "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["queryResult"][0]


def wait_for_cli_status(dev_server: DevServer, workflow_id: str, predicate, timeout: float = 30) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        status = query_status(dev_server, workflow_id)
        if predicate(status):
            return status
        assert time.monotonic() < deadline, f"status never matched: {status}"
        time.sleep(0.2)


def starter(dev_server: DevServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``starter.py`` as a user runs it, against ``dev_server``."""
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address}
    return subprocess.run([sys.executable, str(REPO_DIR / "starter.py"), *args], capture_output=True, text=True,
                          env=env, cwd=REPO_DIR, timeout=120, check=False, stdin=subprocess.DEVNULL)
