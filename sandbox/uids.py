"""The sandbox uids: a pool of ids without accounts, each leased to one run at a time.

Each lease is a ``flock``, so concurrent runs, even from several worker processes, never share a
uid and so never share RLIMIT_NPROC or can signal each other.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import grp
import os
import pwd
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sandbox.errors import SandboxStartError, sandbox_error

UID_POOL_SIZE = 64


def _id_in_use(uid: int) -> bool:
    """A uid or gid with an account would give the code that account's files."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


@functools.lru_cache(maxsize=4)
def _uid_pool(base: int) -> tuple[int, ...]:
    """The sandbox uids (each also used as gid): ``base`` and up, minus ids of real accounts."""
    return tuple(uid for uid in range(base, base + UID_POOL_SIZE) if not _id_in_use(uid))


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "deerflow-sandbox-uids"
    path.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise SandboxStartError(f"{path} must be a directory of uid {os.geteuid()} with mode 0700", lasting=True)
    return path


def _uid_has_processes(uid: int) -> bool:
    """/proc/<pid> belongs to the process's effective uid."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    return True
    return False


@contextlib.contextmanager
def uid_lease(base: int) -> Iterator[int]:
    """A sandbox uid no other run (of any worker process on this machine) is using."""
    lock_dir = _lock_dir()
    for uid in _uid_pool(base):
        fd = os.open(lock_dir / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            # A worker that crashed mid-run released the lock, but its run may still be ending.
            if _uid_has_processes(uid):
                continue
            yield uid
            return
        finally:
            os.close(fd)  # releases the lock
    raise sandbox_error("every sandbox uid is in use; too many concurrent python_repl_tool runs")
