"""Hands a short command to this checkout's command server (cli/command_server.py), when one runs.

Why: a command's own work is a round trip or two to Temporal, but a new interpreter first spends
0.6-0.7 s of CPU importing Temporal's SDK, pydantic and our settings, ten times what ``temporal``
takes for the same answer (issue #45). The server has imported them once and forks a child per
command, which answers in about a tenth of that. Mercurial's ``chg`` does the same for ``hg``.

The child runs the command as this process would: with this process's arguments, environment,
working directory, umask, niceness and standard streams (their descriptors are passed over the
socket), so ``.env``, ``conf.yaml``, ``TEMPORAL_ADDRESS``, a pipe or a terminal mean what they mean
here. Ctrl-C and the other terminal signals are passed on to it, Ctrl-Z stops it with this process,
and its exit status is this process's. Whatever goes wrong on the way (no server, one of older code,
a socket of another user) leaves the command to run here, as without a server, and starts a server
for the next one.

Only the short commands that read or decide are served; ``run``, ``watch``, ``serve`` and the rest
start processes or hold a terminal for long, and gain nothing from it. ``DEERFLOW_CLI_SERVER=off`` in
the environment turns the server off (it is read before anything else loads, so not from ``.env``).

Imports only the standard library, and beyond ``os`` and ``sys`` only once a command is one to serve:
this module is loaded by every command, ``--help`` and ``--version`` too (json and socket alone were
a tenth of their 0.15 s).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

SERVED = frozenset({"status", "report", "list", "costs", "review", "cancel", "answer", "budget"})
SWITCH = "DEERFLOW_CLI_SERVER"
# The checkout (or site-packages) whose code a server runs: one server per checkout and interpreter.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_ADDRESS_BYTES = 107  # a Unix socket's path, terminating zero excluded
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")  # what a terminal or a supervisor sends
STALE = b"stale"  # the server's answer when its code is no longer this checkout's
LAUNCH = "import sys; sys.path.insert(0, sys.argv[1]); import starter; starter.command_server(sys.argv[2])"


def address() -> str | None:
    """The server's socket: in a folder of this user's only, named after the checkout, the interpreter
    and the text encodings it starts with (a child keeps its server's). None when the path is too
    long for a socket."""
    import hashlib

    base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    identity = "\0".join([ROOT, sys.executable, str(sys.flags.utf8_mode), sys.getfilesystemencoding()])
    name = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    path = os.path.join(base, f"deerflow-cli-{os.getuid()}", name)
    return path if len(os.fsencode(path)) <= MAX_ADDRESS_BYTES else None


def private_folder(folder: str) -> bool:
    """Whether ``folder`` is a directory of this user's that nobody else may enter, creating it if
    missing. Another user's folder of that name (made first in a shared /tmp) may hold a socket that
    would read this process's environment, secrets included: never use it."""
    import stat

    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    found = os.lstat(folder)
    return stat.S_ISDIR(found.st_mode) and found.st_uid == os.getuid() and not found.st_mode & 0o077


def peer_uid(channel: socket.socket) -> int:
    """The user ID of the process at the other end of a Unix socket, as the kernel knows it."""
    import socket

    credentials = channel.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # pid, uid, gid
    return int.from_bytes(credentials[4:8], sys.byteorder)


def served(argv: list[str]) -> int | None:
    """``argv``'s exit status, the command run by this checkout's server; None when it is to run in
    this process (not a served command, the server off or not there: then one is started)."""
    if not argv or argv[0] not in SERVED or os.environ.get(SWITCH, "on").lower() in ("off", "0", "no", "false"):
        return None
    import socket

    path = address()
    if path is None or not private_folder(os.path.dirname(path)):
        return None
    relay = SignalRelay()  # from before the request: a Ctrl-C as the child starts is the child's too
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        channel.connect(path)
        ours = peer_uid(channel) == os.getuid()
        if ours:
            socket.send_fds(channel, [_request()], [0, 1, 2])
        reply = channel.recv(64) if ours else b""
    except OSError:  # no server, or a standard stream closed (it cannot be passed): run it here
        ours, reply = True, b""
    if not reply.isdigit():
        channel.close()
        if ours:  # never start one beside another user's
            start_server(path)
        relay.give_back()
        return None
    relay.to(int(reply))
    with channel:
        return _outcome(channel, int(reply))


class SignalRelay:
    """Passes the signals a terminal or a supervisor sends this process on to the child that runs
    its command, holding those that come before the child's pid is known, and stops the child with
    this process on Ctrl-Z."""

    def __init__(self) -> None:
        import signal

        self.child: int | None = None
        self.held: list[int] = []
        ignored = ignored_signals()
        self.previous = {number: signal.signal(number, self._pass_on)
                         for number in (getattr(signal, name) for name in FORWARDED if name not in ignored)}
        if signal.getsignal(signal.SIGTSTP) == signal.SIG_DFL:
            self.previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self._stop)

    def _stop(self, number: int, _frame: object) -> None:
        """Ctrl-Z stops the child, then this process, as the shell expects; ``fg`` or ``bg`` continues
        this process, which continues the child. Without it the child, outside the terminal's
        process group, would go on writing to the terminal, and reading it, beside the shell.
        SIGSTOP, since the child's process group (its server's) is orphaned: the kernel discards a
        SIGTSTP sent to it. Continued in every case: a stop of this process discarded for the same
        reason returns at once."""
        import signal

        if self.child is not None:
            os.kill(self.child, signal.SIGSTOP)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)  # stops here until continued
        signal.signal(number, self._stop)
        if self.child is not None:
            os.kill(self.child, signal.SIGCONT)

    def _pass_on(self, number: int, _frame: object) -> None:
        if self.child is None:
            self.held.append(number)
        else:
            os.kill(self.child, number)  # the server reaps the child only after reporting: the pid is still its

    def to(self, child: int) -> None:
        self.child = child
        for number in self.held:
            os.kill(child, number)

    def give_back(self) -> None:
        """No child: the handlers as they were, and the signals held delivered to this process."""
        import signal

        for number, handler in self.previous.items():
            signal.signal(number, handler)
        for number in self.held:
            os.kill(os.getpid(), number)


def _request() -> bytes:
    """What the child needs to be this process: arguments, environment and working directory as bytes
    (a name that is not UTF-8 passes unchanged), umask, niceness, how the standard streams encode, and
    which signals it ignores (``nohup``, a shell's background job: the child must ignore them too)."""
    import json

    umask = os.umask(0o022)
    os.umask(umask)
    streams = {name: [stream.encoding, stream.errors or "strict", stream.write_through]
               for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout), ("stderr", sys.stderr))}
    return json.dumps({
        "argv": [os.fsencode(part).decode("latin-1") for part in sys.argv],
        "env": {key.decode("latin-1"): value.decode("latin-1") for key, value in os.environb.items()},
        "cwd": os.getcwdb().decode("latin-1"),
        "umask": umask,
        "niceness": os.getpriority(os.PRIO_PROCESS, 0),
        "streams": streams,
        "ignored": ignored_signals(),
    }).encode()


def ignored_signals() -> list[str]:
    """Which of the signals passed on this process ignores (it was started ignoring them)."""
    import signal

    return [name for name in FORWARDED if signal.getsignal(getattr(signal, name)) == signal.SIG_IGN]


def _outcome(channel: socket.socket, child: int) -> int:
    """The child's exit status, once its server reports how it ended. A server killed meanwhile cannot
    report it: this process then waits for the child to end (it writes to this process's terminal or
    pipe until then), and fails."""
    import select
    import signal

    status = channel.recv(64)
    if not status.lstrip(b"-").isdigit():
        try:
            with open(os.pidfd_open(child), "rb", buffering=0) as ended:
                select.select([ended], [], [])
        except ProcessLookupError:  # it has ended already
            pass
        print("Error: the command server was killed before the command ended; its exit status is lost",
              file=sys.stderr)
        return 1
    code = int(status)
    if code < 0:  # ended by a signal: so does this process, as the shell expects
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def start_server(path: str) -> None:
    """Start a server for the next command, in a session of its own, its errors in a log beside the
    socket. Two commands may start one each: the second finds the first's lock and leaves."""
    log = os.open(f"{path}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        # -P and the explicit path: the code is this checkout's, never a ``cli`` in the working directory.
        os.posix_spawn(sys.executable, [sys.executable, "-P", "-c", LAUNCH, ROOT, path], os.environ,
                       file_actions=[(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, log, 1),
                                     (os.POSIX_SPAWN_DUP2, log, 2)], setsid=True)
    except OSError:
        pass
    finally:
        os.close(log)
        os.close(null)


def stop_command_server() -> bool:
    """Remove this checkout's server's socket (``starter.py down``): it takes no new command, and leaves
    within seconds, once those running have ended. Whether there was one."""
    path = address()
    if path is None:
        return False
    try:
        os.unlink(path)
    except OSError:
        return False
    return True
