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
from runtime.embedded import DEV_SERVER_QUEUE_FLAGS, DEV_SERVER_STORAGE_FLAGS, _start_time, free_port, has_worker
from tests.support.zygote import ForkedProcess, zygote

REPO_DIR = Path(__file__).resolve().parents[2]
TEMPORAL_CLI = str(Path(sysconfig.get_path("scripts")) / "temporal")
TEST_SERVER = str(Path(sysconfig.get_path("scripts")) / "temporal-test-server")  # the time-skipping one


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def kill_group(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL the process group ``pid`` leads, and return once that process is gone (not even a
    zombie), as after a crash: what the test does next cannot meet it still there."""
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while _start_time(pid) is not None:
        assert time.monotonic() < deadline, f"process {pid} outlived its SIGKILL by {timeout:.0f} s"
        time.sleep(0.05)


class DevServer:
    """``temporal server start-dev`` on free ports with a database file, so it can be restarted.

    It keeps that file and its task queues' partitions as the embedded default does
    (``DEV_SERVER_STORAGE_FLAGS``, ``DEV_SERVER_QUEUE_FLAGS``), so tests and benches time and measure
    what users run; ``extra_args`` come after and may override either (the later value wins).
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
             *DEV_SERVER_QUEUE_FLAGS,
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


# Workers a test started and has not stopped, and how much of each one's log a failed test's report
# shows (tests/support/failure_logs.py): the temporary folders that hold the logs are gone once the run
# ends, so a test that failed or timed out with a worker running keeps its only record of what it did.
RUNNING_WORKERS: set[WorkerProcess] = set()
LOG_TAIL_CHARS = 8000


def running_worker_logs() -> list[tuple[str, str]]:
    """A report section (title, the end of the log) for each worker started and not yet stopped."""
    sections = []
    for worker in sorted(RUNNING_WORKERS, key=lambda running: str(running.log_path)):
        text = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else "(no log)"
        sections.append((f"worker log {worker.log_path} (its last {LOG_TAIL_CHARS} characters)",
                         text[-LOG_TAIL_CHARS:]))
    return sections


class WorkerProcess:
    """``python worker.py`` in its own process group (with its own offline providers).

    ``niceness`` is added to this process's own (``nice -n``; the kernel caps the sum at 19), so a
    worker can be started at a lower priority than what runs beside it, as on a batch host.
    This checkout's worker is forked from the test process's zygote (tests/support/zygote.py: the
    same script, without paying its imports again); ``fresh`` starts it from a new interpreter, for
    the tests of start-up itself, as does another checkout (``repo``).
    """

    def __init__(self, address: str, log_path: Path, env: dict[str, str] | None = None,
                 repo: Path = REPO_DIR, niceness: int = 0, fresh: bool = False) -> None:
        self.address = address
        self.repo = repo  # the checkout whose code the worker runs (another build in deploy tests)
        self.log_path = log_path
        self.env = env or {}
        self.niceness = niceness
        self.fresh = fresh or repo != REPO_DIR
        self.process: subprocess.Popen[bytes] | ForkedProcess | None = None

    def command(self, script: Path) -> list[str]:
        """The command line that runs ``script`` at this worker's niceness (``nice`` execs it: same pid)."""
        nice = ["nice", "-n", str(self.niceness)] if self.niceness else []
        return [*nice, sys.executable, str(script)]

    def environment(self) -> dict[str, str]:
        """The worker's environment: the test's, without providers (and without .env, unless the test
        gives one: a developer's real keys there must not reach it), pointed at ``address``."""
        return {**without_provider_settings(os.environ), "DEERFLOW_ENV_FILE": os.devnull,
                "TEMPORAL_ADDRESS": self.address, **self.env}

    def start(self) -> WorkerProcess:
        env = self.environment()
        with self.log_path.open("ab") as log:
            if self.fresh:
                self.process = subprocess.Popen(self.command(self.repo / "worker.py"), cwd=self.repo, env=env,
                                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            else:
                self.process = zygote().spawn(self.repo / "worker.py", [], env=env, cwd=self.repo, stdout=log,
                                              stderr=log, niceness=self.niceness)
        RUNNING_WORKERS.add(self)
        return self

    def kill(self) -> None:
        """SIGKILL the whole group: no graceful shutdown, like a crashed machine."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None
        RUNNING_WORKERS.discard(self)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None
        RUNNING_WORKERS.discard(self)


class ServeProcess:
    """``starter.py serve`` (the API server) as its own process, so killing it drops every connection,
    as a crash does. ``home`` is its ``DEERFLOW_HOME``: shared with the workers, it holds the blobs
    both read and the token-stream announcement the workers find it by (never the checkout's)."""

    def __init__(self, address: str, port: int, log: Path, home: Path, env: dict[str, str] | None = None) -> None:
        """``env`` adds to the test's environment, which goes without its ``DEERFLOW_WEB_*`` settings."""
        base = {key: value for key, value in os.environ.items() if not key.startswith("DEERFLOW_WEB_")}
        env = {**base, "TEMPORAL_ADDRESS": address, "DEERFLOW_HOME": str(home), **(env or {})}
        self.port = port
        with log.open("ab") as output:  # forked from the zygote, as the tests' workers are
            self.process = zygote().spawn(REPO_DIR / "starter.py", ["serve", "--port", str(port)], env=env,
                                          cwd=REPO_DIR, stdout=output, stderr=output)
        try:
            wait_for_port(port)
        except TimeoutError as error:  # say why: it may have left (its exit status) or hung (its log)
            self.kill()
            raise TimeoutError(f"{error}; starter.py serve exited with {self.process.poll()}; its log:\n"
                               f"{log.read_text(errors='replace')[-4000:]}") from None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send ``sig`` to the server's own process, as a deploy or Ctrl-C does, and wait for it to
        end; its exit code. One that outlives ``timeout`` is killed and fails the test."""
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"starter.py serve did not end within {timeout} s of {signal.Signals(sig).name}") \
                from None


# A CPU-bound loop that lowers its own priority by argv[1] and ends by itself after argv[2] seconds.
_BUSY_LOOP = ("import os, sys, time\nos.nice(int(sys.argv[1]))\nend = time.monotonic() + float(sys.argv[2])\n"
              "while time.monotonic() < end:\n    pass\n")


class BusyLoops:
    """``count`` CPU-bound processes beside the processes under test, each at ``niceness`` added to ours.

    Bounded twice: each loop ends by itself after ``seconds`` (so a test or bench killed half-way
    leaves none running on a shared machine), and :meth:`stop` (also on leaving the ``with``) kills
    those still running.
    """

    def __init__(self, count: int, seconds: float, niceness: int = 0) -> None:
        self.count = count
        self.seconds = seconds
        self.niceness = niceness
        self.loops: list[subprocess.Popen[bytes]] = []
        self.started_at = 0.0  # monotonic
        self.killed_at: float | None = None

    def start(self) -> BusyLoops:
        self.started_at = time.monotonic()
        self.loops = [subprocess.Popen([sys.executable, "-c", _BUSY_LOOP, str(self.niceness), str(self.seconds)])
                      for _ in range(self.count)]
        return self

    @property
    def ended_at(self) -> float:
        """When the loops stopped or will stop (monotonic): their own deadline, or when they were killed."""
        deadline = self.started_at + self.seconds
        return deadline if self.killed_at is None else min(deadline, self.killed_at)

    def stop(self) -> None:
        for loop in self.loops:
            if loop.poll() is None:
                if self.killed_at is None:
                    self.killed_at = time.monotonic()
                loop.kill()
            loop.wait(timeout=30)

    def __enter__(self) -> BusyLoops:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


async def wait_for_worker(client: Client, log: Path, timeout: float = 60) -> None:
    """Until the worker writing ``log`` says it polls and the server lists a poller; on time-out the
    worker's log says why it did not. The log line matters on a module's shared dev server: the server
    lists an earlier test's dead worker for minutes, and a signal sent before this one has installed
    its handlers kills it instead of stopping it."""
    deadline = time.monotonic() + timeout
    while not (log.exists() and "Worker polling" in log.read_text(errors="replace") and await has_worker(client)):
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


async def exit_code(worker: WorkerProcess, timeout: float) -> int:
    """The worker process's exit code, waiting up to ``timeout`` seconds for it to end."""
    assert worker.process is not None
    deadline = time.monotonic() + timeout
    while (code := worker.process.poll()) is None:
        assert time.monotonic() < deadline, f"the worker did not exit within {timeout} s"
        await asyncio.sleep(0.1)
    return code


def wait_for_cli_status(dev_server: DevServer, workflow_id: str, predicate, timeout: float = 30) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        status = query_status(dev_server, workflow_id)
        if predicate(status):
            return status
        assert time.monotonic() < deadline, f"status never matched: {status}"
        time.sleep(0.2)


def run_starter(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python starter.py ARGS`` with ``env`` and no input, its output captured; forked from the
    zygote (tests/support/zygote.py), so each command does not pay its imports again."""
    return zygote().run(REPO_DIR / "starter.py", list(args), env=env, cwd=REPO_DIR, timeout=timeout)


def starter(dev_server: DevServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``starter.py`` as a user runs it, against ``dev_server``."""
    return run_starter({**os.environ, "TEMPORAL_ADDRESS": dev_server.address}, *args)
