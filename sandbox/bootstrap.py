"""The sandbox's bootstrap: the short program between the worker and the model's code.

This file is the security boundary as a file boundary: it runs in the child process, before the
code, and imports the standard library only (it runs with ``python -I -S``). The activity
(``sandbox/runner.py``) starts it as ``python -I -S -c 'import bootstrap' deerflow-python-sandbox
<config>`` with this directory first on ``sys.path``, so that it starts from cached bytecode of
this small file alone. It is a separate program rather than a ``preexec_fn`` because
``preexec_fn`` runs Python between fork and exec of the worker, whose other threads (the Temporal
core) may hold locks at fork time.

``isolated`` mode: unshare mount, PID, network and IPC namespaces and fork the code's process,
which becomes PID 1 of the new PID namespace. It builds a new root on a tmpfs (read-only binds of
the system directories and the interpreter's prefixes, a minimal ``/dev``, a fresh ``/proc``, a
private ``/dev/shm``), mounts the work directory as a size-capped tmpfs owned by the sandbox uid,
chroots, drops to that uid with ``no_new_privs``, writes the snippet there *as that uid* (so the
bootstrap needs neither CAP_CHOWN nor CAP_DAC_OVERRIDE) and execs it. The capabilities it uses
are exactly SYS_ADMIN (unshare, mount), SYS_CHROOT, SETUID, SETGID and KILL (the supervisor,
root, kills the code's PID 1, another uid): docker-compose.yml grants no more.

``plain`` mode (an explicit operator opt-in): only the limits and ``no_new_privs``, then exec.

libc is called through ``_ctypes`` directly: ``import ctypes`` alone costs ~7 ms per run.
"""

from __future__ import annotations

import _ctypes
import _signal  # not ``signal``: its enums would cost every run ~10 ms
import marshal
import os
import resource
import sys

TYPE_CHECKING = False  # ``import typing`` would cost every run ~5 ms; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, NoReturn

BOOT_MARKER = "deerflow-python-sandbox"  # argv[1] of every bootstrap process: findable with ps
BOOT_MODULE = "bootstrap"  # imported as a top-level module of this name (see the docstring)
SETUP_FAILED_EXIT = 125
SANDBOX_NICENESS = 10  # the code's least niceness: a CPU-bound snippet must not starve the worker's heartbeats

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


class _Int(_ctypes._SimpleCData):
    _type_ = "i"


class _ULong(_ctypes._SimpleCData):
    _type_ = "L"


class _LibcFunction(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    _handle = _ctypes.dlopen(None, os.RTLD_NOW)


_step = ["starting"]  # the setup step under way, named by the report should it fail (see _report)


def _at(step: str) -> None:
    _step[0] = step


def _libc_call(name: str, *args: Any) -> None:
    """Call a libc function that returns -1 and sets errno (``os`` lacks these before 3.12)."""
    if _LibcFunction((name, _Libc))(*args) != 0:
        errno = _ctypes.get_errno()
        raise OSError(errno, f"{name} failed: {os.strerror(errno)}")


def _cstr(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _mount(target: str, source: str | None = None, fstype: str | None = None, flags: int = 0,
           data: str | None = None) -> None:
    _libc_call("mount", _cstr(source), _cstr(target), _cstr(fstype), _ULong(flags), _cstr(data))


def _prctl(option: int, value: int) -> None:
    # unsigned long arguments: a plain int would leave the upper half of the register undefined.
    _libc_call("prctl", option, _ULong(value), _ULong(0), _ULong(0), _ULong(0))


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


def _write_snippet(path: str, source: bytes) -> None:
    """Written by the sandbox uid into its own tmpfs: no capability needed, none used."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, source)  # a tmpfs write of a snippet is never short
    finally:
        os.close(fd)


def _enter_sandbox(config: dict[str, Any], source: bytes | None = None) -> NoReturn:
    """Limits, then the uid switch, then exec the code (in the sandbox's cwd)."""
    _at("setting the rlimits")
    _apply_limits(config["limits"])
    if config["uid"] is not None:
        _at(f"switching to sandbox uid {config['uid']}")
        _drop_privileges(config["uid"])
    _at("setting no_new_privs")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries (su, sudo) cannot raise privileges again
    # At least as nice as the worker: lowering the niceness needs a privilege the code must not have
    # (EACCES for a worker started with nice -n 15), and the code must not outrank its worker.
    niceness = max(SANDBOX_NICENESS, os.getpriority(os.PRIO_PROCESS, 0))
    _at(f"setting niceness {niceness}")
    os.setpriority(os.PRIO_PROCESS, 0, niceness)
    if config["mode"] == "isolated":
        _at("setting the parent-death signal")
        # A backstop if the bootstrap itself is SIGKILLed: set after the uid switch, which clears it.
        _prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL)
    if source is not None:
        _at("writing the snippet")
        os.chdir(config["workdir"])
        _write_snippet(config["script"], source)
    _at("starting the interpreter")
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


def _build_root(config: dict[str, Any]) -> bytes:
    """Build the new root over the (host) work directory, chroot into it, return the snippet.

    Runs as root inside the new mount and PID namespaces, so none of these mounts is visible to
    the host, and all of them disappear with the namespace.
    """
    workdir, uid = config["workdir"], config["uid"]
    with open(config["script"], "rb") as file:  # read before the work directory is covered
        source = file.read()
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
    _mount(root, flags=_MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _at("entering the new root (chroot)")
    os.chroot(root)
    os.chdir("/")  # the work directory is the sandbox uid's (0700): entered after the uid switch
    return source


def _report(status_fd: int, error: BaseException) -> None:
    """Tell the activity why setup failed (a pipe closed on exec, so silence means success): the
    errno (0 if none), a space, and the failing step with the error (sandbox/runner.py reads it)."""
    errno = error.errno if isinstance(error, OSError) and error.errno else 0
    try:
        os.write(status_fd, f"{errno} {_step[0]}: {type(error).__name__}: {error}".encode()[:4000])
    except OSError:
        return  # nobody is listening any more


def _boot_child(config: dict[str, Any]) -> NoReturn:
    """PID 1 of the new namespace: build the root, then become the code."""
    try:
        for signum in (_signal.SIGTERM, _signal.SIGALRM):
            _signal.signal(signum, _signal.SIG_DFL)
        _at("building the new root")
        source = _build_root(config)
        _enter_sandbox(config, source)
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
    _at("creating the namespaces")
    _libc_call("unshare", _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET | _CLONE_NEWIPC)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _prctl(_PR_SET_DUMPABLE, 0)
    supervision = _Supervision()
    for signum in (_signal.SIGTERM, _signal.SIGALRM):
        _signal.signal(signum, supervision.stop)  # before the fork: no window without a handler
    _signal.alarm(config["deadline"])  # a backstop should the worker die without stopping us
    _at("starting the code's process")
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


if __name__ == BOOT_MODULE:
    os._exit(_boot_main(sys.argv))  # nothing to flush or finalize
