"""Running one snippet: a fresh work directory, the bootstrap, supervision and the result.

In every mode: ``no_new_privs``, niceness 10 or the worker's own if higher (a CPU-bound snippet
must not starve the worker's heartbeats), rlimits RLIMIT_CPU (timeout + 1 s; ``stopped="cpu"``), RLIMIT_AS
(``DEERFLOW_SANDBOX_MEMORY_MB``; ``stopped="memory"``), RLIMIT_NPROC 64 (per uid, hence the uid
pool), RLIMIT_FSIZE 10 MB, RLIMIT_NOFILE 64, RLIMIT_CORE 0; a wall-clock timeout
(``timeout_seconds`` clamped to 1..300 s; ``stopped="timeout"``); output capped at 64 KiB per
stream (head and tail kept) and the run stopped once 8 MiB were printed (``stopped="output"``);
unbuffered output, so what was printed before a timeout is kept; the run killed when the activity
is cancelled. In ``isolated`` mode the work directory is a tmpfs of ``DEERFLOW_SANDBOX_DISK_MB``.

The code failing (exception, non-zero exit, a limit) is a normal ``PythonResult``; only a sandbox
that cannot start raises (``ApplicationError`` of type ``SandboxError``).

Known limits: RLIMIT_AS is per process, so up to 64 processes may each use the memory cap (give
the sandbox container a memory and pids limit, as docker-compose.yml does); the code is PID 1 of
its namespace, so signals it sends itself with the default action are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import math
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.settings import Settings
from sandbox.bootstrap import BOOT_MARKER, BOOT_MODULE
from sandbox.errors import LASTING_ERRNOS, SandboxStartError
from sandbox.output import SandboxProtocol
from sandbox.uids import uid_lease
from workflows.contracts.tool_activities import PythonResult

ISOLATED = "isolated"
PLAIN = "plain"

SCRIPT_NAME = "snippet.py"
MIN_TIMEOUT_SECONDS = 1.0
MAX_TIMEOUT_SECONDS = 300.0
DEFAULT_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 3.0  # how long the bootstrap gets to take its namespace down
PIPE_GRACE_SECONDS = 1.0  # how long output may still arrive after the process exited

MIB = 1024 * 1024
_BOOT_STUB = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import {BOOT_MODULE}"
_MEMORY_ERROR = re.compile(r"^MemoryError\b", re.MULTILINE)


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one run; defaults are generous for data crunching, small for abuse."""

    memory_bytes: int = 1024 * MIB
    processes: int = 64
    file_bytes: int = 10_000_000
    open_files: int = 64
    disk_bytes: int = 64 * MIB  # the work directory's tmpfs (isolated mode)
    output_keep_bytes: int = 64 * 1024  # per stream, head and tail
    output_stop_bytes: int = 8 * MIB  # both streams together; then the run is stopped

    @classmethod
    def from_settings(cls, settings: Settings) -> SandboxLimits:
        return cls(memory_bytes=settings.sandbox_memory_mb * MIB, disk_bytes=settings.sandbox_disk_mb * MIB)

    def rlimits(self, timeout: float) -> dict[str, list[int]]:
        """(soft, hard) per limit; CPU's hard limit is one second above the soft one so that a
        normal process gets SIGXCPU (reported as ``cpu``) before the kernel's SIGKILL."""
        cpu = math.ceil(timeout) + 1
        return {
            "cpu": [cpu, cpu + 1],
            "memory": [self.memory_bytes] * 2,
            "processes": [self.processes] * 2,
            "file_size": [self.file_bytes] * 2,
            "open_files": [self.open_files] * 2,
            "core": [0, 0],
        }


def _sandbox_env(workdir: str) -> dict[str, str]:
    """All the code gets: no key, token or proxy setting of the worker."""
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
            "TMPDIR": workdir}


def _interpreter_paths() -> list[str]:
    """Where the interpreter and its standard library live (bound into the isolated root)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths = prefixes | {os.path.realpath(p) for p in prefixes}
    return sorted(paths, key=len)


def clamp_timeout(seconds: float) -> float:
    """1..300 s: long enough for real work, short enough to hold a sandbox uid."""
    if not math.isfinite(seconds):
        return DEFAULT_TIMEOUT_SECONDS
    return min(max(seconds, MIN_TIMEOUT_SECONDS), MAX_TIMEOUT_SECONDS)


def _boot_config(mode: str, workdir: str, uid: int | None, timeout: float, limits: SandboxLimits) -> dict[str, Any]:
    """What the bootstrap needs; plain values only, as it travels marshalled in argv."""
    return {
        "mode": mode,
        "python": sys.executable,
        "script": os.path.join(workdir, SCRIPT_NAME),
        "workdir": workdir,
        "uid": uid,
        "limits": limits.rlimits(timeout),
        "disk_bytes": limits.disk_bytes,
        "binds": _interpreter_paths(),
        "deadline": math.ceil(timeout) + 10,
    }


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _done_within(future: asyncio.Future[None], seconds: float) -> bool:
    try:
        await asyncio.wait_for(asyncio.shield(future), seconds)
    except TimeoutError:
        return False
    return True


async def _stop(pid: int, protocol: SandboxProtocol, mode: str) -> None:
    """End the run now. Isolated: ask the (root) bootstrap, which takes the namespace down
    and reaps it; killing the bootstrap first would leave its child to the machine's PID 1."""
    if mode == ISOLATED:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if await _done_within(protocol.exited, STOP_GRACE_SECONDS):
            return
    _kill_group(pid)
    await _done_within(protocol.exited, STOP_GRACE_SECONDS)


async def _clean_up(pid: int, protocol: SandboxProtocol, mode: str) -> None:
    """After the main process: nothing it started may survive (isolated: the kernel did it)."""
    if mode == PLAIN:
        # The group id is the bootstrap's pid, reaped a moment ago: it stays taken while any
        # member lives, and reusing it would need the pid space to wrap in between.
        _kill_group(pid)
    await _done_within(protocol.closed, PIPE_GRACE_SECONDS)


async def _supervise(pid: int, protocol: SandboxProtocol, mode: str, timeout: float) -> str | None:
    """Wait for the exit, the timeout or too much output; return why the sandbox stopped it."""
    try:
        await asyncio.wait({protocol.exited, protocol.overflow}, timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
        stopped = None
        if not protocol.exited.done():
            stopped = "output" if protocol.overflow.done() else "timeout"
            await _stop(pid, protocol, mode)
        await _clean_up(pid, protocol, mode)
        return stopped
    except asyncio.CancelledError:
        await _stop(pid, protocol, mode)
        await _clean_up(pid, protocol, mode)
        raise


def _read_status(fd: int) -> tuple[int, str]:
    """The bootstrap's setup error, if any: its errno and the failing step with the error
    (empty text: the code was started)."""
    os.set_blocking(fd, False)
    try:
        status = os.read(fd, 65536).decode("utf-8", errors="replace")
    except BlockingIOError:
        return 0, ""
    errno, _, text = status.partition(" ")
    return (int(errno), text) if errno.isdigit() else (0, status)


def _limit_hit(returncode: int | None, stderr: str) -> str | None:
    """Which limit ended a run the activity did not stop itself."""
    if returncode == -signal.SIGXCPU:
        return "cpu"
    if returncode not in (0, None) and _MEMORY_ERROR.search(stderr):
        return "memory"
    return None


async def _run_boot(config: dict[str, Any], timeout: float, limits: SandboxLimits) -> PythonResult:
    """Start the bootstrap, supervise it, and turn what it left into a ``PythonResult``."""
    status_read, status_write = os.pipe()
    config["status_fd"] = status_write
    argv = [sys.executable, "-I", "-S", "-c", _BOOT_STUB, BOOT_MARKER, marshal.dumps(config).hex()]
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: SandboxProtocol(limits.output_keep_bytes, limits.output_stop_bytes), *argv,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                cwd=config["workdir"], env=_sandbox_env(config["workdir"]), start_new_session=True,
                pass_fds=(status_write,))
        finally:
            os.close(status_write)
        pid = transport.get_pid()
        try:
            stopped = await _supervise(pid, protocol, config["mode"], timeout)
        finally:
            if transport.get_returncode() is None:  # e.g. cancelled twice while stopping
                _kill_group(pid)
            transport.close()
        duration = time.monotonic() - started
        errno, failure = _read_status(status_read)
    finally:
        os.close(status_read)
    if failure:
        raise SandboxStartError(f"the sandbox could not start the code ({config['mode']} mode): {failure}",
                                lasting=errno in LASTING_ERRNOS)
    returncode = transport.get_returncode()
    stderr = protocol.captures[2].text()
    return PythonResult(stdout=protocol.captures[1].text(), stderr=stderr, exit_code=returncode,
                        stopped=stopped or _limit_hit(returncode, stderr), duration_seconds=round(duration, 3))


@contextlib.contextmanager
def _run_uid(mode: str, uid_base: int) -> Iterator[int | None]:
    """Isolated runs each get a pool uid; plain runs keep the worker's (the operator's choice)."""
    if mode != ISOLATED:
        yield None
        return
    with uid_lease(uid_base) as uid:
        yield uid


async def execute(code: str, mode: str, timeout: float, limits: SandboxLimits, uid_base: int) -> PythonResult:
    """One run in a fresh work directory, deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix="deerflow-py-", ignore_cleanup_errors=True) as workdir, \
            _run_uid(mode, uid_base) as uid:
        # Lone surrogates are written replaced: a syntax error, reported like any other.
        Path(workdir, SCRIPT_NAME).write_text(code, encoding="utf-8", errors="replace")
        config = _boot_config(mode, workdir, uid, timeout, limits)
        return await _run_boot(config, timeout, limits)
