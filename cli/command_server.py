"""This checkout's command server: imports what the short commands need once, then forks a child
for each command a client hands it (cli/command_client.py says why and what is served).

The server is single-threaded and never connects to Temporal itself, so each child starts clean: its
own Temporal runtime and connection, its own event loop. It waits for each child and reports its
exit status to the client; a client that leaves (its terminal closed, killed) takes its child with
it. The server leaves after half an hour without a command, when its socket is removed or replaced,
and, once its children are done, as soon as a client finds its code older than the checkout's (an
upgrade, a ``git pull``): that client runs the command itself and starts a server of the new code.

Only this user's processes are served: the socket is this user's alone, in a folder of theirs alone.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import importlib
import json
import locale
import os
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from cli.command_client import FORWARDED, SERVED, STALE, address, private_folder
from runtime.forked_child import (
    StreamSettings,
    close_inherited_descriptors,
    exit_code,
    flush_standard_streams,
    reopen_standard_streams,
    send_quietly,
)

IDLE_SECONDS = 30 * 60
CHECK_SECONDS = 5.0  # how often an idle server looks at its socket and the clock
MAX_REQUEST_BYTES = 1 << 20
# The selector's marks: the listener, a child's pidfd; a client's channel is marked with its child's pidfd.
LISTENING, ENDED = "listening", "ended"
# What every command imports besides its own module (cli/main.py): the settings and the event loop,
# the errors' classes a failure is reported with, and the filter of its arguments.
WARM_MODULES = ("cli.main", "asyncio", "config.settings", "temporalio.service", "runtime.connection",
                "runtime.embedded", "runtime.encryption", "runtime.front_door", "runtime.shutdown",
                "workflows.text.untrusted_text")


def main(path: str, build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """Serve on ``path`` until idle, replaced or stale; leave at once if another server holds it.
    ``build_parser`` is starter.py's: the command line with its web servers (cli/ may not import it)."""
    if path != address() or not private_folder(os.path.dirname(path)):
        return
    lock = _locked(f"{path}.lock")
    if lock is None:
        return
    parser = warm_up(build_parser)
    Server(path, installed_stamp(), parser).serve()
    os._exit(0)  # at once: a successor waits for the lock, and nothing here needs finalizing


def _locked(path: str) -> int | None:
    """An exclusive lock on ``path`` held for the process's life, or None when another server has it.
    Never waited for: a server that waited for its predecessor to leave came back after ``down``."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    return descriptor


def installed_stamp() -> str:
    """The checkout's code stamp (runtime/build_info.py), and the times of the other folders imports
    come from (site-packages): installing, upgrading or removing a library adds or removes entries
    there. Either changed, and what the server imported is no longer what a command would import."""
    from runtime.build_info import ROOT, code_stamp

    times = []
    for entry in sys.path:
        if entry and os.path.abspath(entry) != str(ROOT):  # the checkout's own files are in the code stamp
            try:
                times.append(str(os.stat(entry).st_mtime_ns))
            except OSError:
                times.append("-")
    return f"{code_stamp()}:{','.join(times)}"


def warm_up(build_parser: Callable[[], argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Import every served command's module and what each imports on its way (the settings, asyncio,
    the errors' classes), and build the validators our models defer to their first use, so that a
    child builds nothing it could share; then freeze it all, so that children do not copy the pages
    of what they all share. Returns the command line's parser (parsing leaves it as it was)."""
    from cli.parser import Command, command_handlers

    parser = build_parser()
    for name, handler in command_handlers(parser).items():
        if name in SERVED and isinstance(handler, Command):
            handler.load()
    for module in WARM_MODULES:
        importlib.import_module(module)
    _build_deferred_validators()
    if threading.active_count() != 1:  # a fork would leave those threads' locks held in every child
        raise RuntimeError(f"importing started threads: {threading.enumerate()}")
    gc.collect()
    gc.freeze()
    return parser


def _build_deferred_validators() -> None:
    """The settings' and the loaded contracts' validators (config/groups/base.py and
    workflows/contracts/base.py defer them): the settings' alone were a fifth of a served command."""
    from config.settings import Settings
    from workflows.contracts.base import Contract

    Settings.model_rebuild()
    waiting: list[type[Contract]] = [Contract]
    while waiting:
        model = waiting.pop()
        waiting.extend(model.__subclasses__())
        if model is not Contract:
            with contextlib.suppress(Exception):  # a model that cannot be built yet is built as it is used
                model.model_rebuild()


@dataclass(frozen=True)
class Child:
    """A command running in a forked child, and the channel its client waits on."""

    pid: int
    command: str
    channel: socket.socket


@dataclass
class Server:
    """The listening socket and the children still running, each with its client's channel."""

    path: str
    stamp: str
    parser: argparse.ArgumentParser
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    children: dict[int, Child] = field(default_factory=dict)  # by pidfd
    listener: socket.socket | None = None
    last_command: float = field(default_factory=time.monotonic)
    terminated: bool = False  # SIGTERM: leave as when the code changed, the commands running finished

    def serve(self) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a server that died without cleaning up; the lock says none runs
        self.listener.bind(self.path)
        os.chmod(self.path, 0o600)
        self.listener.listen(64)
        self.selector.register(self.listener, selectors.EVENT_READ, LISTENING)
        bound = os.stat(self.path).st_ino
        signal.signal(signal.SIGTERM, self._terminate)  # the children take their caller's (become)
        print(f"serving {self.path} (pid {os.getpid()})", file=sys.stderr, flush=True)
        while self.listener is not None or self.children:
            for key, _ in self.selector.select(CHECK_SECONDS):
                if key.data == LISTENING:
                    if self.listener is not None:  # unless an earlier event of this round closed it
                        self._accept()
                elif key.data == ENDED:
                    self._reap(key.fd)
                elif key.data in self.children:  # unless its child was reaped earlier in this round
                    self._client_spoke(key.fileobj, key.data)
            if self.listener is not None and (self.terminated or self._should_leave(bound)):
                self._stop_listening(unlink=self.terminated)

    def _terminate(self, _number: int, _frame: object) -> None:
        """SIGTERM (a logout, a supervisor): no new command, and the running ones end as their callers
        expect, reported to them; only SIGKILL leaves them without their server (cli/command_client.py)."""
        self.terminated = True

    def _should_leave(self, bound: int) -> bool:
        """Idle too long, or the socket removed or replaced (``starter.py down``, another server)."""
        try:
            replaced = os.stat(self.path).st_ino != bound
        except FileNotFoundError:
            replaced = True
        idle = not self.children and time.monotonic() - self.last_command > IDLE_SECONDS
        return replaced or idle

    def _stop_listening(self, unlink: bool) -> None:
        """No new command; the running ones are still waited for and reported."""
        assert self.listener is not None
        self.selector.unregister(self.listener)
        self.listener.close()
        self.listener = None
        if unlink:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def _accept(self) -> None:
        assert self.listener is not None
        channel, _ = self.listener.accept()
        self.last_command = time.monotonic()
        streams: list[int] = []
        try:  # no peer to check: only this user reaches the socket (cli/command_client.py: private_folder)
            message, streams, _, _ = socket.recv_fds(channel, MAX_REQUEST_BYTES, 3)
            request = json.loads(message)
            command = request["argv"][1]
        except (OSError, ValueError, LookupError, TypeError):
            _close_all(streams)
            channel.close()
            return
        stale = installed_stamp() != self.stamp
        if stale or command not in SERVED or len(streams) != 3:
            _close_all(streams)
            send_quietly(channel, STALE)  # the client runs the command itself
            channel.close()
        if stale:  # a successor will serve the next command
            print(f"the checkout's code changed: leaving once {len(self.children)} command(s) end",
                  file=sys.stderr, flush=True)
            self._stop_listening(unlink=True)
        elif command in SERVED and len(streams) == 3:
            self._fork(channel, command, request, streams)

    def _fork(self, channel: socket.socket, command: str, request: dict, streams: list[int]) -> None:
        pid = os.fork()
        if pid == 0:
            self.selector.close()
            become(request, streams, self.parser)
        _close_all(streams)
        send_quietly(channel, str(pid).encode())
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = Child(pid, command, channel)
        self.selector.register(pidfd, selectors.EVENT_READ, ENDED)
        self.selector.register(channel, selectors.EVENT_READ, pidfd)

    def _reap(self, pidfd: int) -> None:
        """A child ended: its status to its client (negative for a signal, as ``Popen.returncode``)."""
        child = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        with contextlib.suppress(KeyError):  # unless the client left first
            self.selector.unregister(child.channel)
        os.close(pidfd)
        _, status, usage = os.wait4(child.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        send_quietly(child.channel, str(code).encode())
        child.channel.close()
        print(f"{child.command} (pid {child.pid}): exit {code}, {usage.ru_utime + usage.ru_stime:.3f} s CPU",
              file=sys.stderr, flush=True)

    def _client_spoke(self, channel: socket.socket, pidfd: int) -> None:
        """A client only ever closes its channel: it left before its command ended, so does the command
        (as a shell's hang-up ends what runs in it). Continued too, as the kernel continues a stopped
        job it hangs up: a command stopped with its caller (Ctrl-Z) would never see the SIGHUP."""
        with contextlib.suppress(OSError):
            if channel.recv(64):
                return
        self.selector.unregister(channel)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.children[pidfd].pid, signal.SIGHUP)
            os.kill(self.children[pidfd].pid, signal.SIGCONT)


def become(request: dict, streams: list[int], parser: argparse.ArgumentParser) -> NoReturn:
    """In the forked child: take the client's streams, environment, directory, umask and niceness,
    run its command line as ``starter.py`` would, and leave with its exit status."""
    code = 1
    try:
        for target, descriptor in enumerate(streams):
            os.dup2(descriptor, target)
        close_inherited_descriptors()
        reopen_standard_streams(*(StreamSettings(*request["streams"][name]) for name in ("stdin", "stdout", "stderr")))
        _take_environment(request)
        from cli import main as cli_main

        sys.argv = [os.fsdecode(part.encode("latin-1")) for part in request["argv"]]
        code = cli_main.main(parser, sys.argv[1:])
    except SystemExit as leaving:
        code = exit_code(leaving.code)
    except KeyboardInterrupt:  # Ctrl-C before the command's own handling began: as after it
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
    flush_standard_streams()
    try:
        from runtime.shutdown import exit_now

        exit_now(code)  # the traces and logs flushed, as the command's own process does
    finally:
        os._exit(code)


def _take_environment(request: dict) -> None:
    """The client's environment (the time zone and the character type read again from it), signals
    ignored, working directory, umask and niceness (only ever raised: a child may not be kinder than
    its client)."""
    os.environb.clear()
    for key, value in request["env"].items():
        os.environb[key.encode("latin-1")] = value.encode("latin-1")
    for name in FORWARDED:  # as the caller has them, not as whoever started the server had them
        number = getattr(signal, name)
        default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
        signal.signal(number, signal.SIG_IGN if name in request["ignored"] else default)
    time.tzset()
    with contextlib.suppress(locale.Error):
        locale.setlocale(locale.LC_CTYPE, "")
    os.chdir(request["cwd"].encode("latin-1"))
    os.umask(request["umask"])
    raise_by = request["niceness"] - os.getpriority(os.PRIO_PROCESS, 0)
    if raise_by > 0:
        os.nice(raise_by)


def _close_all(descriptors: list[int]) -> None:
    for descriptor in descriptors:
        os.close(descriptor)
