"""Each worker process's journal of the activity attempts it is running, and whose journals are dead.

Why: an attempt lost with a SIGKILLed worker is only given up when its heartbeat timeout expires.
A worker restarted on the same machine can do better: if its dead predecessor wrote down the task
token of every attempt it started and had not finished, the successor fails those attempts at once
(hosting/reclaim.py) and the server retries them without waiting.

Cost: one unbuffered ``write`` per attempt start and one per end, and no fsync. The page cache
survives a SIGKILL; a machine crash can lose the tail, and then the heartbeat timeout still applies.
The log is append-only (``+<n> <token>`` and ``-<n>`` lines after a JSON header) and is rewritten
to the attempts still open when it grows past a bound. A ``*<n> <JSON list>`` line holds the
heartbeat details attempt ``n`` asked to carry to its next attempt (``carry`` in
runtime/heartbeat.py): a chat turn notes there, before its request leaves, that a call is
in flight, so the successor's reclaim hands that on and the lost call still counts in the run's usage.

A task token lets its holder complete the attempt it names, so journals are 0600 in a 0700
directory under the operator's ``DEERFLOW_HOME``, and tokens never reach a log line.

Dead or alive: a live writer holds an exclusive ``flock`` on its journal, which the kernel releases
when the process dies, however it dies. A journal is dead only if that lock is free and, when it was
written in this pid namespace, its pid no longer runs the process it names (the start time from
``/proc/<pid>/stat`` tells a reused pid apart, e.g. PID 1 in a restarted container). Only journals
written under this kernel (the same boot id) are judged: another machine sharing the directory over
a network filesystem may not honour the lock, so its journals are left alone.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from runtime.process_info import start_ticks

logger = logging.getLogger(__name__)

SUFFIX = ".journal"
# Rewritten to the open attempts once this many lines were appended since the last rewrite (or 4x
# the open attempts, if more): a few hundred KB at most, so a successor reads it in milliseconds.
COMPACT_LINES = 4096
# Heartbeat details as JSON (a Usage model becomes its dict).
_DETAILS = TypeAdapter(list[Any])
# A journal larger than this is not read (a successor skips it, with a log line): compaction keeps
# a live worker's far below it, so a larger one is not a journal this code wrote.
MAX_JOURNAL_BYTES = 16 * 1024 * 1024


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip()
    except (OSError, ValueError):
        return ""


def _start_ticks(pid: int) -> int | None:
    """``start_ticks``, with an unreadable ``/proc`` taken as unknown (None)."""
    try:
        return start_ticks(pid)
    except OSError:
        return None


def pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


class ProcessStamp(BaseModel):
    """Who wrote a journal: enough to tell later whether that very process still runs."""

    instance: str
    pid: int
    start_ticks: int | None
    host: str
    boot_id: str
    pid_namespace: str
    identity: str  # the worker's Temporal identity (``pid@host``), for the failure message
    address: str  # the Temporal server and namespace its tokens belong to
    namespace: str

    @classmethod
    def here(cls, identity: str, address: str, namespace: str) -> ProcessStamp:
        pid = os.getpid()
        return cls(instance=uuid.uuid4().hex, pid=pid, start_ticks=_start_ticks(pid), host=socket.gethostname(),
                   boot_id=_read("/proc/sys/kernel/random/boot_id"), pid_namespace=pid_namespace(),
                   identity=identity, address=address, namespace=namespace)

    def judges(self, other: ProcessStamp) -> bool:
        """Whether this process can tell if ``other`` lives: it ran under this very kernel (boot)."""
        return bool(self.boot_id) and other.boot_id == self.boot_id

    def is_alive(self) -> bool:
        """Its pid runs the process that started at ``start_ticks``: not gone, not a reused pid.

        A writer that could not read its own start time (no ``/proc``) counts as alive: left alone.
        """
        return self.start_ticks is None or _start_ticks(self.pid) == self.start_ticks


class InflightJournal:
    """This process's journal: ``opened(token)`` when an attempt starts, ``closed(entry)`` when it ends.

    Thread-safe (an activity's interceptor may run off the event loop). A write that fails (disk full,
    directory gone) turns the journal off with one log line: it must never fail an activity.
    """

    def __init__(self, directory: Path, stamp: ProcessStamp) -> None:
        self.directory = directory
        self.stamp = stamp
        self.path = directory / f"{stamp.instance}{SUFFIX}"
        self._lock = threading.Lock()
        self._open: dict[int, bytes] = {}
        self._carried: dict[int, list[Any]] = {}
        self._next = 0
        self._lines = 0
        self._fd: int | None = None
        self._writing = True

    def start(self) -> InflightJournal:
        """Create the directory (0700) and this process's journal (0600), holding only its header."""
        ensure_directory(self.directory)
        self._fd = self._write_new(self.path)
        return self

    def _write_new(self, path: Path) -> int:
        """A new file, locked (held until this process closes it or dies), with the header and open attempts."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lines = [self.stamp.model_dump_json(), *(_open_line(n, token) for n, token in self._open.items()),
                     *(_carried_line(n, details) for n, details in self._carried.items())]
            os.write(fd, "".join(line + "\n" for line in lines).encode("ascii"))
        except OSError:
            os.close(fd)
            raise
        return fd

    def opened(self, task_token: bytes) -> int:
        with self._lock:
            entry = self._next
            self._next += 1
            self._open[entry] = task_token
            self._append(_open_line(entry, task_token))
            return entry

    def carried(self, entry: int, details: Sequence[object]) -> None:
        """Note what open attempt ``entry`` carries to its next attempt; details that are not JSON
        are logged and dropped (the heartbeat still carries them)."""
        try:
            jsonable = _DETAILS.dump_python(list(details), mode="json")
        except (TypeError, ValueError) as error:  # pydantic_core's PydanticSerializationError is a ValueError
            logger.warning("In-flight journal: heartbeat details not noted (%s)", type(error).__name__)
            return
        with self._lock:
            if entry in self._open:
                self._carried[entry] = jsonable
                self._append(_carried_line(entry, jsonable))

    def closed(self, entry: int) -> None:
        with self._lock:
            self._carried.pop(entry, None)
            if self._open.pop(entry, None) is not None:
                self._append(f"-{entry}")
                if self._lines > max(COMPACT_LINES, 4 * len(self._open)):
                    self._compact()

    @property
    def in_flight(self) -> int:
        """Attempts started and not ended in this process."""
        return len(self._open)

    def open_attempts(self) -> list[OpenAttempt]:
        """The attempts in flight, in start order (a stop that cannot wait hands them back)."""
        with self._lock:
            return [OpenAttempt(token, self._carried.get(n, [])) for n, token in self._open.items()]

    def _append(self, line: str) -> None:
        if self._fd is None or not self._writing:
            return
        try:
            os.write(self._fd, (line + "\n").encode("ascii"))
            self._lines += 1
        except OSError as error:
            self._give_up(error)

    def _compact(self) -> None:
        """Rewrite the journal as its header and the open attempts, replacing the old file atomically."""
        temporary = self.path.with_name(self.path.name + ".compacting")
        try:
            temporary.unlink(missing_ok=True)
            fd = self._write_new(temporary)
            os.replace(temporary, self.path)
        except OSError as error:
            self._give_up(error)
            return
        assert self._fd is not None
        os.close(self._fd)
        self._fd = fd
        self._lines = 0

    def _give_up(self, error: OSError) -> None:
        """Stop writing, but keep the file open: its lock still says this process lives."""
        logger.warning("In-flight journal %s turned off (%s): a restart of this worker will wait for the "
                       "heartbeat timeouts of its lost attempts", self.path, error.strerror or error)
        self._writing = False

    def close(self) -> None:
        """On a graceful exit: delete the journal if nothing is open, else leave it to a successor."""
        with self._lock:
            if self._fd is None:
                return
            with contextlib.suppress(OSError):  # a descriptor that already failed (EBADF)
                os.close(self._fd)
            self._fd = None
            if not self._open and self._writing:
                self.path.unlink(missing_ok=True)


def is_dead(path: Path, stamp: ProcessStamp, here: ProcessStamp) -> bool:
    """Whether the process that wrote the journal at ``path`` (described by ``stamp``) has ended.

    Its lock must be free (the kernel drops it with the process) and, in this pid namespace, its pid
    must not run that process any more. A journal written under another kernel is never dead here.
    """
    if not here.judges(stamp) or not _unlocked(path):
        return False
    return stamp.pid_namespace != here.pid_namespace or not stamp.is_alive()


def _unlocked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # gone (another worker claimed it) or unreadable: not ours to reclaim
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the lock just taken
    return True


def _open_line(entry: int, token: bytes) -> str:
    return f"+{entry} {base64.b64encode(token).decode('ascii')}"


def _carried_line(entry: int, details: list[Any]) -> str:
    return f"*{entry} {json.dumps(details, ensure_ascii=True, separators=(',', ':'))}"


def ensure_directory(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if directory.stat().st_mode & 0o077:
        directory.chmod(0o700)


@dataclass(frozen=True)
class OpenAttempt:
    """An attempt started and not ended: its task token, and the heartbeat details it asked to carry
    to its next attempt (empty if it asked nothing)."""

    token: bytes
    carried: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class JournalContents:
    stamp: ProcessStamp
    attempts: list[OpenAttempt]  # in start order
    skipped: int  # lines that did not parse (a torn last line after a machine crash, say)

    @property
    def tokens(self) -> list[bytes]:
        return [attempt.token for attempt in self.attempts]


def read_journal(path: Path) -> JournalContents | None:
    """The journal's writer and its open attempts; None (with a log line) if it is not a journal."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as file:
            data = file.read(MAX_JOURNAL_BYTES + 1)
    except OSError as error:
        logger.warning("In-flight journal %s unreadable: %s", path.name, error.strerror or error)
        return None
    if len(data) > MAX_JOURNAL_BYTES:
        logger.warning("In-flight journal %s skipped: larger than %d bytes", path.name, MAX_JOURNAL_BYTES)
        return None
    header, _, body = data.partition(b"\n")
    try:
        stamp = ProcessStamp.model_validate_json(header)
    except ValidationError:
        logger.warning("In-flight journal %s skipped: its header does not parse", path.name)
        return None
    open_entries: dict[int, bytes] = {}
    carried: dict[int, list[Any]] = {}
    skipped = 0
    for line in body.splitlines():
        try:
            _apply(line.decode("ascii"), open_entries, carried)
        except (ValueError, binascii.Error):  # json's JSONDecodeError is a ValueError
            skipped += 1
    return JournalContents(stamp, [OpenAttempt(token, carried.get(n, [])) for n, token in open_entries.items()],
                           skipped)


def _apply(line: str, open_entries: dict[int, bytes], carried: dict[int, list[Any]]) -> None:
    if line.startswith("+"):
        entry, encoded = line[1:].split(" ", 1)
        open_entries[int(entry)] = base64.b64decode(encoded, validate=True)
    elif line.startswith("-"):
        open_entries.pop(int(line[1:]), None)
        carried.pop(int(line[1:]), None)
    elif line.startswith("*"):
        entry, text = line[1:].split(" ", 1)
        details = json.loads(text)
        if not isinstance(details, list):
            raise ValueError("carried details are not a list")
        if int(entry) in open_entries:
            carried[int(entry)] = details
    else:
        raise ValueError("not a journal line")
