"""The ``python_repl_tool`` activity: the coder's Python, run in a separate, sandboxed process.

DeerFlow runs the coder's code inside the server process, with the server's secrets, network and
files. Here every call gets a fresh interpreter that is contained as far as the machine allows.

How one call runs
-----------------
The activity writes the code to ``snippet.py`` in a fresh ``TemporaryDirectory`` and starts this
very file as a *bootstrap* (``python -I -S -c 'import python_exec' deerflow-python-sandbox ...``) in
its own session, with a scrubbed environment (``PATH``, ``HOME``/``TMPDIR`` = the work directory,
``LANG=C.UTF-8``, ``PYTHONIOENCODING``): no API key ever reaches the sandbox. The bootstrap sets
things up and finally execs ``python -I -u snippet.py``. It is a separate short program rather
than a ``preexec_fn`` because ``preexec_fn`` runs Python between fork and exec of the worker, whose
other threads (the Temporal core) may hold locks at fork time.

Sandbox modes, detected once (``sandbox_mode()``; ``DEERFLOW_SANDBOX_MODE`` forces one and then
fails instead of falling back)
---------------------------------------------------------------------------------------------
``isolated`` (worker is root and may create namespaces; the mode on the development machine):
    The bootstrap unshares mount, PID, network and IPC namespaces and forks the code's process,
    which becomes PID 1 of the new PID namespace. That process builds a new root on a tmpfs
    (read-only binds of ``/usr``, ``/bin``, ``/lib*``, ``/etc`` and the interpreter's prefixes, a
    minimal ``/dev``, a fresh ``/proc``, a private 16 MiB ``/dev/shm``), mounts the work directory
    as a 64 MiB tmpfs owned by the sandbox user, chroots into it and drops to an unprivileged uid
    with ``no_new_privs``. Consequences: no network at all (not even loopback), nothing of the
    repository, ``/root``, ``/home`` or the host's ``/tmp`` is visible, writes outside the work
    directory fail (read-only file system), other processes are invisible, and when the code's
    main process ends the kernel kills everything it started. Stopping the run means SIGTERM to
    the bootstrap (root, so the code cannot touch it), which SIGKILLs the namespace's PID 1.
``unprivileged`` (root, but namespaces are not allowed, e.g. Docker without CAP_SYS_ADMIN):
    No namespaces; the code runs under an unprivileged uid in the (uid-owned) work directory.
    File permissions protect the repository and keys, RLIMIT_NPROC is enforced, but the network
    and world-writable directories (``/tmp``) are reachable. Leftover processes are killed with
    ``kill(-1, SIGKILL)`` run as the sandbox uid, which reaches processes that left the group.
``plain`` (the worker is not root):
    Only the resource limits, the scrubbed environment and process-group kills. This is **not**
    a security boundary: the code runs as the worker's user and can read its files and
    ``/proc/<worker>/environ``. A warning is logged once. A *root* worker never falls back to
    ``plain`` by itself (the code would run as root, where RLIMIT_NPROC does not even apply):
    if neither mode above works, the activity fails with a non-retryable ``SandboxError`` that
    says why (typically: the sandbox uid cannot execute the interpreter, as with a pyenv Python
    under ``/root``), unless ``DEERFLOW_SANDBOX_MODE=plain`` accepts it.

In every mode: ``no_new_privs``, nice 10 (a CPU-bound snippet must not starve the worker's
heartbeats), rlimits RLIMIT_CPU (timeout + 1 s; ``stopped="cpu"``), RLIMIT_AS (1 GiB,
``DEERFLOW_SANDBOX_MEMORY_MB``; ``stopped="memory"``), RLIMIT_NPROC 64 (per uid, and root is
exempt on Linux, hence the uid switch), RLIMIT_FSIZE 10 MB, RLIMIT_NOFILE 64, RLIMIT_CORE 0; a
wall-clock timeout (``timeout_seconds`` clamped to 1..300 s; ``stopped="timeout"``); output
capped at 64 KiB per stream (head and tail kept, a ``[output truncated ...]`` marker between)
and the run stopped once 8 MiB were printed (``stopped="output"``); unbuffered output, so what
was printed before a timeout is kept; heartbeats (``activities.heartbeat``, every 2 s) while it
runs; the run killed (as on a timeout) when the activity is cancelled.

Sandbox uids come from a pool (``DEERFLOW_SANDBOX_UID_BASE``, default 64000, 64 ids that have no
passwd/group entry), each leased with ``flock`` so concurrent runs, even from several worker
processes, never share a uid and so never share RLIMIT_NPROC or can signal each other.

Known limits: RLIMIT_AS is per process, so up to 64 processes may each use 1 GiB; give the worker
container a memory (and pids) limit. In ``unprivileged`` mode, orphans are reparented to PID 1 of
the container; run it with an init that reaps (``docker run --init``). In ``isolated`` mode the
code is PID 1 of its namespace, so signals it sends itself with the default action are ignored.

The code failing (exception, non-zero exit, a limit) is a normal ``PythonResult``; only a sandbox
that cannot start raises (``ApplicationError`` of type ``SandboxError``).
"""

# This file doubles as the bootstrap, which runs with -S (no site-packages): only the standard
# library may be imported above the bootstrap's guard, so the activity's imports come after it.
# ruff: noqa: E402

from __future__ import annotations

import _signal  # not ``signal``: its enums would cost the bootstrap ~10 ms on every run
import ctypes
import marshal
import os
import resource
import sys

# ---------------------------------------------------------------- the bootstrap (its own process)

BOOT_MARKER = "deerflow-python-sandbox"  # argv[1] of every bootstrap process: findable with ps
# The bootstrap imports this file as a top-level module of this name (``-c "import python_exec"``
# with this directory first on sys.path) rather than running it as a script, so that it starts
# from the cached bytecode instead of compiling the whole file on every run.
_BOOT_MODULE = "python_exec"
SETUP_FAILED_EXIT = 125

_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38

_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_RLIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "memory": resource.RLIMIT_AS,
    "processes": resource.RLIMIT_NPROC,
    "file_size": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
    "core": resource.RLIMIT_CORE,
}


def _libc_call(name: str, *args: Any) -> None:
    """Call a libc function that returns -1 and sets errno (``os`` lacks these before 3.12)."""
    function = getattr(ctypes.CDLL(None, use_errno=True), name)
    if function(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name} failed: {os.strerror(errno)}")


def _cstr(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _mount(target: str, source: str | None = None, fstype: str | None = None, flags: int = 0,
           data: str | None = None) -> None:
    _libc_call("mount", _cstr(source), _cstr(target), _cstr(fstype), ctypes.c_ulong(flags), _cstr(data))


def _prctl(option: int, value: int) -> None:
    # unsigned long arguments: a plain int would leave the upper half of the register undefined.
    _libc_call("prctl", option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
               ctypes.c_ulong(0))


def _apply_limits(limits: dict[str, list[int]]) -> None:
    """Lower each rlimit to (soft, hard); never above the current hard limit (that needs a cap)."""
    for key, (soft, hard) in limits.items():
        which = _RLIMITS[key]
        current_hard = resource.getrlimit(which)[1]
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))


def _drop_privileges(uid: int) -> None:
    """setresuid clears every capability, so RLIMIT_NPROC and file permissions apply from here."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _enter_sandbox(config: dict[str, Any]) -> NoReturn:
    """Limits, then the uid switch, then exec the code (in the sandbox's cwd)."""
    _apply_limits(config["limits"])
    if config["uid"] is not None:
        _drop_privileges(config["uid"])
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries (su, sudo) cannot raise privileges again
    os.setpriority(os.PRIO_PROCESS, 0, 10)  # a CPU-bound snippet must not starve the worker's heartbeats
    if config["mode"] == "isolated":
        # A backstop if the bootstrap itself is SIGKILLed: set after the uid switch, which clears it.
        _prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL)
    python = config["python"]
    os.execv(python, [python, "-I", "-u", config["script"]])


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _expose(root: str, path: str, exposed: list[str]) -> None:
    """Make ``path`` visible read-only at the same place under ``root`` (symlinks are copied)."""
    if not os.path.lexists(path) or any(_within(path, done) for done in exposed):
        return
    target = root + path
    if os.path.islink(path):
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.symlink(os.readlink(path), target)
    elif os.path.isdir(path):
        os.makedirs(target, mode=0o755, exist_ok=True)
        _mount(target, path, flags=_MS_BIND | _MS_REC)
        _mount(target, flags=_MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    else:
        return
    exposed.append(path)


def _build_dev(root: str) -> None:
    """A minimal /dev: a few harmless devices, fd links and a private, small /dev/shm."""
    dev = root + "/dev"
    os.mkdir(dev, 0o755)
    _mount(dev, "tmpfs", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755")
    for name in _DEVICES:
        os.close(os.open(f"{dev}/{name}", os.O_WRONLY | os.O_CREAT, 0o644))
        _mount(f"{dev}/{name}", f"/dev/{name}", flags=_MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(dev + "/shm", 0o755)
    _mount(dev + "/shm", "tmpfs", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
           "size=16m,nr_inodes=1024,mode=1777")
    _mount(dev, flags=_MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC)


def _read_file(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _build_root(config: dict[str, Any]) -> None:
    """Build the new root over the (host) work directory, then chroot into it.

    Runs as root inside the new mount and PID namespaces, so none of these mounts is visible to
    the host, and all of them disappear with the namespace.
    """
    workdir, uid = config["workdir"], config["uid"]
    source = _read_file(config["script"])  # read before the work directory is covered
    os.umask(0o022)
    _mount("/", flags=_MS_REC | _MS_PRIVATE)  # nothing below may propagate back to the host
    root = workdir
    _mount(root, "tmpfs", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=1m,nr_inodes=4096,mode=0755")
    exposed: list[str] = []
    for path in (*_SYSTEM_PATHS, *config["binds"]):
        _expose(root, path, exposed)
    _build_dev(root)
    os.mkdir(root + "/proc", 0o555)
    _mount(root + "/proc", "proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    inner = root + workdir
    os.makedirs(inner, mode=0o755)
    _mount(inner, "tmpfs", "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={config['disk_bytes']},nr_inodes=16384,mode=0700,uid={uid},gid={uid}")
    fd = os.open(inner + "/" + os.path.basename(config["script"]), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, source)  # a tmpfs write of a snippet is never short
        os.fchown(fd, uid, uid)
    finally:
        os.close(fd)
    _mount(root, flags=_MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    os.chroot(root)
    os.chdir(workdir)


def _report(status_fd: int, error: BaseException) -> None:
    """Tell the activity why setup failed (a pipe closed on exec, so silence means success)."""
    try:
        os.write(status_fd, f"{type(error).__name__}: {error}".encode()[:4000])
    except OSError:
        return  # nobody is listening any more


def _boot_child(config: dict[str, Any]) -> NoReturn:
    """PID 1 of the new namespace: build the root, then become the code."""
    try:
        for signum in (_signal.SIGTERM, _signal.SIGALRM):
            _signal.signal(signum, _signal.SIG_DFL)
        _build_root(config)
        _enter_sandbox(config)
    except BaseException as error:
        _report(config["status_fd"], error)
    os._exit(SETUP_FAILED_EXIT)


class _Supervision:
    """What the isolated bootstrap's signal handler needs: the child and whether it was stopped."""

    def __init__(self) -> None:
        self.child = 0
        self.stopping = False

    def stop(self, signum: int = 0, frame: object = None) -> None:
        self.stopping = True
        if self.child > 0:
            try:
                os.kill(self.child, _signal.SIGKILL)  # from the parent namespace: kills even PID 1
            except ProcessLookupError:
                self.child = 0  # already gone


def _mirror_exit(status: int, usage: resource.struct_rusage, config: dict[str, Any], stopping: bool) -> int:
    """Exit the way the code did, so the activity sees the code's return code."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    signum = os.WTERMSIG(status)
    cpu_soft_limit = config["limits"]["cpu"][0]
    if signum == _signal.SIGKILL and not stopping and usage.ru_utime + usage.ru_stime >= cpu_soft_limit - 0.5:
        # PID 1 of a namespace ignores SIGXCPU, so the kernel's hard-limit SIGKILL ended it.
        signum = _signal.SIGXCPU
    if signum not in (_signal.SIGKILL, _signal.SIGSTOP):  # those two cannot have a handler
        _signal.signal(signum, _signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # no core file: RLIMIT_CORE is 0 and the bootstrap is not dumpable
    return 128 + signum


def _boot_isolated(config: dict[str, Any]) -> int:
    """Unshare the namespaces, fork the code as their PID 1, and wait for it."""
    _libc_call("unshare", _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _prctl(_PR_SET_DUMPABLE, 0)
    supervision = _Supervision()
    for signum in (_signal.SIGTERM, _signal.SIGALRM):
        _signal.signal(signum, supervision.stop)  # before the fork: no window without a handler
    _signal.alarm(config["deadline"])  # a backstop should the worker die without stopping us
    child = os.fork()
    if child == 0:
        _boot_child(config)
    supervision.child = child
    try:
        if supervision.stopping:
            supervision.stop()
        os.close(config["status_fd"])
        _, status, usage = os.wait4(child, 0)
    except BaseException:
        supervision.stop()
        raise
    _signal.alarm(0)
    return _mirror_exit(status, usage, config, supervision.stopping)


def _boot_main(argv: list[str]) -> int:
    config = marshal.loads(bytes.fromhex(argv[2]))
    status_fd = config["status_fd"]
    os.set_inheritable(status_fd, False)  # closed by the exec of the code
    try:
        if config["mode"] == "isolated":
            return _boot_isolated(config)
        _enter_sandbox(config)
    except BaseException as error:
        _report(status_fd, error)
    return SETUP_FAILED_EXIT


if __name__ == _BOOT_MODULE:
    os._exit(_boot_main(sys.argv))  # nothing to flush or finalize

# ---------------------------------------------------------------- the activity

import asyncio
import contextlib
import fcntl
import functools
import grp
import logging
import math
import pwd
import re
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from workflows.models import PythonRequest, PythonResult

logger = logging.getLogger(__name__)

ISOLATED = "isolated"
UNPRIVILEGED = "unprivileged"
PLAIN = "plain"
MODES = (ISOLATED, UNPRIVILEGED, PLAIN)

MODE_ENV = "DEERFLOW_SANDBOX_MODE"
MEMORY_ENV = "DEERFLOW_SANDBOX_MEMORY_MB"
UID_BASE_ENV = "DEERFLOW_SANDBOX_UID_BASE"
DEFAULT_UID_BASE = 64000
UID_POOL_SIZE = 64

SANDBOX_ERROR = "SandboxError"
SCRIPT_NAME = "snippet.py"
MIN_TIMEOUT_SECONDS = 1.0
MAX_TIMEOUT_SECONDS = 300.0
DEFAULT_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 3.0  # how long the bootstrap gets to take its namespace down
PIPE_GRACE_SECONDS = 1.0  # how long output may still arrive after the process exited

MIB = 1024 * 1024
_BOOT_STUB = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import {_BOOT_MODULE}"
_KILL_ALL_CODE = "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept ProcessLookupError:\n    pass\n"
_PROBE_CODE = "import os\nprint(os.getuid())\n"
_MEMORY_ERROR = re.compile(r"^MemoryError\b", re.MULTILINE)


def sandbox_error(message: str, non_retryable: bool = False) -> ApplicationError:
    """The sandbox itself failed (not the code): an activity error, retried unless told not to."""
    return ApplicationError(message, type=SANDBOX_ERROR, non_retryable=non_retryable)


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
    def from_env(cls) -> SandboxLimits:
        megabytes = os.environ.get(MEMORY_ENV, "").strip()
        return cls(memory_bytes=int(megabytes) * MIB) if megabytes else cls()

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


@dataclass(frozen=True)
class SandboxMode:
    """The containment this machine allows (see the module docstring), and why not more."""

    name: str
    reason: str = ""

    @property
    def network_isolated(self) -> bool:
        return self.name == ISOLATED

    @property
    def separate_user(self) -> bool:
        return self.name in (ISOLATED, UNPRIVILEGED)


# ---------------------------------------------------------------- output capture


class _Capture:
    """Keeps the head and the tail of a stream (a traceback is at the end) and counts the rest."""

    def __init__(self, keep_bytes: int) -> None:
        self.half = keep_bytes // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        omitted = self.total - len(self.head) - len(self.tail)
        marker = f"\n[output truncated: {omitted} bytes omitted]\n".encode() if omitted else b""
        return bytes(self.head + marker + self.tail).decode("utf-8", errors="replace")


class _SandboxProtocol(asyncio.SubprocessProtocol):
    """Collects output as it arrives and reports the exit, which does not wait for the pipes."""

    def __init__(self, limits: SandboxLimits) -> None:
        loop = asyncio.get_running_loop()
        self.captures = {1: _Capture(limits.output_keep_bytes), 2: _Capture(limits.output_keep_bytes)}
        self.stop_bytes = limits.output_stop_bytes
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.overflow: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.captures[fd].feed(data)
        if not self.overflow.done() and sum(c.total for c in self.captures.values()) > self.stop_bytes:
            self.overflow.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


# ---------------------------------------------------------------- uids


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
    if base < 1000 or base + UID_POOL_SIZE > 2**31:
        raise sandbox_error(f"{UID_BASE_ENV}={base} is outside 1000..2**31", non_retryable=True)
    return tuple(uid for uid in range(base, base + UID_POOL_SIZE) if not _id_in_use(uid))


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "deerflow-sandbox-uids"
    path.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise sandbox_error(f"{path} must be a directory of uid {os.geteuid()} with mode 0700")
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
def _uid_lease(mode: SandboxMode) -> Iterator[int | None]:
    """A sandbox uid no other run (of any worker process on this machine) is using."""
    if not mode.separate_user:
        yield None
        return
    lock_dir = _lock_dir()
    for uid in _uid_pool(int(os.environ.get(UID_BASE_ENV, DEFAULT_UID_BASE))):
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


# ---------------------------------------------------------------- running one snippet


def _sandbox_env(workdir: str) -> dict[str, str]:
    """All the code gets: no key, token or proxy setting of the worker."""
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
            "TMPDIR": workdir}


def _interpreter_paths() -> list[str]:
    """Where the interpreter and its standard library live (bound into the isolated root)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths = prefixes | {os.path.realpath(p) for p in prefixes}
    return sorted(paths, key=len)


def _clamp_timeout(seconds: float) -> float:
    """1..300 s: long enough for real work, short enough to hold a sandbox uid."""
    if not math.isfinite(seconds):
        return DEFAULT_TIMEOUT_SECONDS
    return min(max(seconds, MIN_TIMEOUT_SECONDS), MAX_TIMEOUT_SECONDS)


def _boot_config(mode: SandboxMode, workdir: str, uid: int | None, timeout: float,
                 limits: SandboxLimits) -> dict[str, Any]:
    """What the bootstrap needs; plain values only, as it travels marshalled in argv."""
    return {
        "mode": mode.name,
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


async def _kill_uid(uid: int) -> None:
    """SIGKILL every process of the sandbox uid, also those that left the process group.

    ``kill(-1)`` runs as that uid, so it cannot reach anything else; the kernel holds the task
    list while it signals, so a fork bomb cannot outrun it.
    """
    if uid in (0, os.getuid()):
        raise sandbox_error(f"refusing to kill every process of uid {uid}", non_retryable=True)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", "-c", _KILL_ALL_CODE, user=uid, group=uid, extra_groups=[], env={},
        cwd="/", stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    await process.wait()


async def _done_within(future: asyncio.Future[None], seconds: float) -> bool:
    try:
        await asyncio.wait_for(asyncio.shield(future), seconds)
    except TimeoutError:
        return False
    return True


async def _stop(pid: int, protocol: _SandboxProtocol, mode: SandboxMode) -> None:
    """End the run now. Isolated: ask the (root) bootstrap, which takes the namespace down
    and reaps it; killing the bootstrap first would leave its child to the machine's PID 1."""
    if mode.name == ISOLATED:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if await _done_within(protocol.exited, STOP_GRACE_SECONDS):
            return
    _kill_group(pid)
    await _done_within(protocol.exited, STOP_GRACE_SECONDS)


async def _clean_up(pid: int, protocol: _SandboxProtocol, mode: SandboxMode, uid: int | None) -> None:
    """After the main process: nothing it started may survive (isolated: the kernel did it)."""
    if mode.name == UNPRIVILEGED and uid is not None:
        await _kill_uid(uid)
    elif mode.name == PLAIN:
        # The group id is the bootstrap's pid, reaped a moment ago: it stays taken while any
        # member lives, and reusing it would need the pid space to wrap in between.
        _kill_group(pid)
    await _done_within(protocol.closed, PIPE_GRACE_SECONDS)


async def _supervise(pid: int, protocol: _SandboxProtocol, mode: SandboxMode, uid: int | None,
                     timeout: float) -> str | None:
    """Wait for the exit, the timeout or too much output; return why the sandbox stopped it."""
    try:
        await asyncio.wait({protocol.exited, protocol.overflow}, timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
        stopped = None
        if not protocol.exited.done():
            stopped = "output" if protocol.overflow.done() else "timeout"
            await _stop(pid, protocol, mode)
        await _clean_up(pid, protocol, mode, uid)
        return stopped
    except asyncio.CancelledError:
        await _stop(pid, protocol, mode)
        await _clean_up(pid, protocol, mode, uid)
        raise


def _read_status(fd: int) -> str:
    """The bootstrap's setup error, if any (empty: the code was started)."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536).decode("utf-8", errors="replace")
    except BlockingIOError:
        return ""


def _limit_hit(returncode: int | None, stderr: str) -> str | None:
    """Which limit ended a run the activity did not stop itself."""
    if returncode == -signal.SIGXCPU:
        return "cpu"
    if returncode not in (0, None) and _MEMORY_ERROR.search(stderr):
        return "memory"
    return None


async def _run_boot(config: dict[str, Any], mode: SandboxMode, timeout: float,
                    limits: SandboxLimits) -> PythonResult:
    """Start the bootstrap, supervise it, and turn what it left into a ``PythonResult``."""
    status_read, status_write = os.pipe()
    config["status_fd"] = status_write
    argv = [sys.executable, "-I", "-S", "-c", _BOOT_STUB, BOOT_MARKER, marshal.dumps(config).hex()]
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _SandboxProtocol(limits), *argv, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=config["workdir"],
                env=_sandbox_env(config["workdir"]), start_new_session=True, pass_fds=(status_write,))
        finally:
            os.close(status_write)
        pid = transport.get_pid()
        try:
            stopped = await _supervise(pid, protocol, mode, config["uid"], timeout)
        finally:
            if transport.get_returncode() is None:  # e.g. cancelled twice while stopping
                _kill_group(pid)
            transport.close()
        duration = time.monotonic() - started
        failure = _read_status(status_read)
    finally:
        os.close(status_read)
    if failure:
        raise sandbox_error(f"the sandbox could not start the code ({mode.name} mode): {failure}")
    returncode = transport.get_returncode()
    stderr = protocol.captures[2].text()
    return PythonResult(stdout=protocol.captures[1].text(), stderr=stderr, exit_code=returncode,
                        stopped=stopped or _limit_hit(returncode, stderr), duration_seconds=round(duration, 3))


async def _execute(code: str, mode: SandboxMode, timeout: float, limits: SandboxLimits) -> PythonResult:
    """One run in a fresh work directory, deleted afterwards."""
    with tempfile.TemporaryDirectory(prefix="deerflow-py-", ignore_cleanup_errors=True) as workdir, \
            _uid_lease(mode) as uid:
        script = Path(workdir, SCRIPT_NAME)
        script.write_text(code, encoding="utf-8", errors="replace")  # lone surrogates: a syntax error
        if mode.name == UNPRIVILEGED and uid is not None:
            for path in (workdir, script):
                os.chown(path, uid, uid)
        config = _boot_config(mode, workdir, uid, timeout, limits)
        return await _run_boot(config, mode, timeout, limits)


# ---------------------------------------------------------------- mode detection


async def _probe(name: str) -> str | None:
    """Run a trivial snippet in mode ``name``; return why it failed, or None."""
    try:
        result = await _execute(_PROBE_CODE, SandboxMode(name), 10.0, SandboxLimits.from_env())
    except (ApplicationError, OSError) as error:
        return str(error)
    if result.exit_code != 0:
        return f"exit code {result.exit_code}: {result.stderr.strip()[-300:]}"
    if name != PLAIN and result.stdout.strip() in ("", "0"):
        return "the code still ran as root"
    return None


async def _detect_mode() -> SandboxMode:
    """The strongest mode that works here. A root worker never falls back to ``plain`` on its
    own: that would run model-written code as root, where not even RLIMIT_NPROC applies."""
    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced and forced not in MODES:
        raise sandbox_error(f"{MODE_ENV}={forced!r}; use one of {', '.join(MODES)}", non_retryable=True)
    is_root = os.geteuid() == 0
    candidates = (forced,) if forced else (ISOLATED, UNPRIVILEGED) if is_root else (PLAIN,)
    reasons = [] if is_root else ["the worker is not root, so it can neither switch the code to "
                                  "another uid nor create namespaces"]
    for name in candidates:
        failure = await _probe(name)
        if failure is None:
            if forced:
                reasons.append(f"forced by {MODE_ENV}")
            mode = SandboxMode(name, "; ".join(reasons))
            if name != ISOLATED:
                logger.warning("python_repl_tool sandbox runs in %r mode, weaker than 'isolated': %s",
                               name, mode.reason)
            return mode
        reasons.append(f"{name} mode failed: {failure}")
    hint = "" if forced or not is_root else (
        f" (the sandbox uid must be able to read and execute {sys.executable} and its standard "
        f"library; or set {MODE_ENV}=plain to accept running the code as root)")
    raise sandbox_error("no sandbox mode works: " + "; ".join(reasons) + hint, non_retryable=True)


_mode: SandboxMode | None = None
_mode_lock: asyncio.Lock | None = None


async def sandbox_mode() -> SandboxMode:
    """The sandbox mode of this worker process, probed on first use and then cached."""
    global _mode, _mode_lock
    if _mode is None:
        _mode_lock = _mode_lock or asyncio.Lock()
        async with _mode_lock:
            if _mode is None:
                _mode = await _detect_mode()
    return _mode


@activity.defn(name="python_repl_tool")
@heartbeating
async def python_repl_tool(request: PythonRequest) -> PythonResult:
    """Run the coder's Python in the sandbox; failures of the code are results, not errors."""
    mode = await sandbox_mode()
    return await _execute(request.code, mode, _clamp_timeout(request.timeout_seconds), SandboxLimits.from_env())
