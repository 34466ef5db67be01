"""A process that has imported the worker and the CLI once, and forks the suite's processes of them.

Why: the suite starts about 70 ``worker.py`` processes and 90 ``starter.py`` commands, and each
spends seconds of CPU importing the same modules (the SDK's protobufs, our pydantic models, the
model libraries: 3.3 s of a worker's 4.4 s start here) before it does anything a test looks at. On
two cores that is a quarter of ``make test``. The zygote imports them once per test process, and
each process the tests ask for is forked from it and runs the script as ``python SCRIPT ARGS``
would: as ``__main__``, in a session of its own, with the test's environment, working directory,
standard streams and niceness. It has its own pid, Temporal runtime, connections, fork server and
signal handling, so SIGTERM, SIGKILL, the in-flight journal and the reclaim behave as for a process
started from nothing. What a fork does not exercise, a cold interpreter's imports and start-up, is
left to the tests that start processes the plain way (``fresh=True``: start-up, deploys, the image).

The tests' side is :class:`ForkedProcess`, the part of ``subprocess.Popen`` they use. A child's
parent is the zygote, which waits for it and sends its exit status down the request's socket.
The zygote leaves when its parent (the test process) does: its standard input reaches end of file.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import pkgutil
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import IO, NoReturn

from runtime.forked_child import (
    StreamSettings,
    close_inherited_descriptors,
    exit_code,
    flush_standard_streams,
    reopen_standard_streams,
    send_quietly,
)

REPO_DIR = Path(__file__).resolve().parents[2]
# What every forked process finds imported: the two entry scripts' trees, the API server (``serve``)
# and the model libraries a worker preloads (activities/support/lazy.py); and every command's module,
# which starter.py imports only when that command runs (cli/parser.py: Command).
WARM_MODULES = ("worker", "starter", "server.serve", "activities.model.llm")
WARM_PACKAGES = ("cli",)
READY = b"ready\n"
MAX_REQUEST_BYTES = 1 << 20


class ForkedProcess:
    """A process the zygote forked: what the tests use of ``subprocess.Popen``.

    ``channel`` is the request's socket; the zygote writes the exit status to it once the process
    has ended (``os.waitstatus_to_exitcode``: negative for a signal, as ``Popen.returncode``).
    """

    def __init__(self, args: list[str], pid: int, channel: socket.socket) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._channel = channel

    def poll(self) -> int | None:
        if self.returncode is None:
            self._channel.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                self._settle(self._channel.recv(64))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._channel.settimeout(timeout)
            try:
                self._settle(self._channel.recv(64))
            except (TimeoutError, BlockingIOError):  # the latter for a timeout of 0 (a non-blocking socket)
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0) from None
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _settle(self, status: bytes) -> None:
        if not status:
            raise RuntimeError(f"the zygote left before reporting how process {self.pid} ended")
        self.returncode = int(status)
        self._channel.close()


class Zygote:
    """The client of one zygote process, started on first use (:func:`zygote`)."""

    def __init__(self) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="zygote-"))  # short: a socket's path has 107 bytes at most
        self.address = str(self._folder / "socket")
        self._log = self._folder / "zygote.log"
        with self._log.open("wb") as log:
            self.process = subprocess.Popen([sys.executable, "-m", __name__, self.address], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=log, cwd=REPO_DIR)
        assert self.process.stdout is not None
        if self.process.stdout.readline() != READY:
            self.process.kill()
            raise RuntimeError(f"the zygote did not start:\n{self._log.read_text()}")

    def spawn(self, script: Path, args: list[str], *, env: dict[str, str], cwd: Path,
              stdin: IO[bytes] | int | None = None, stdout: IO[bytes] | int | None = None,
              stderr: IO[bytes] | int | None = None, niceness: int = 0) -> ForkedProcess:
        """``python SCRIPT ARGS`` in a new session, forked from the zygote (``stdin`` is /dev/null if
        not given; ``stdout`` and ``stderr`` are the test process's own if not given)."""
        request = json.dumps({"script": str(script), "args": args, "env": env, "cwd": str(cwd),
                              "niceness": niceness}).encode()
        with open(os.devnull, "rb") as devnull:
            streams = [_descriptor(stdin, devnull.fileno()), _descriptor(stdout, 1), _descriptor(stderr, 2)]
            channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            channel.connect(self.address)
            socket.send_fds(channel, [request], streams)
        reply = channel.recv(64)
        if not reply.isdigit():
            channel.close()
            raise RuntimeError(f"the zygote could not fork {script}: {reply.decode(errors='replace')}")
        return ForkedProcess([str(script), *args], int(reply), channel)

    def run(self, script: Path, args: list[str], *, env: dict[str, str], cwd: Path,
            timeout: float) -> subprocess.CompletedProcess[str]:
        """As ``subprocess.run(..., capture_output=True, text=True, stdin=DEVNULL)``: the output
        read until both streams close, a process outliving ``timeout`` killed (``TimeoutExpired``)."""
        (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
        try:
            process = self.spawn(script, args, env=env, cwd=cwd, stdout=out_write, stderr=err_write)
        except BaseException:
            os.close(out_read)
            os.close(err_read)
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        captured = {out_read: bytearray(), err_read: bytearray()}
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for descriptor in captured:
                selector.register(descriptor, selectors.EVENT_READ)
            while selector.get_map():
                ready = selector.select(deadline - time.monotonic())
                if not ready:
                    process.kill()
                    process.wait()
                    for descriptor in captured:
                        os.close(descriptor)
                    raise subprocess.TimeoutExpired(process.args, timeout)
                for key, _ in ready:
                    chunk = os.read(key.fd, 1 << 16)
                    captured[key.fd] += chunk
                    if not chunk:
                        selector.unregister(key.fd)
                        os.close(key.fd)
        code = process.wait(max(0.0, deadline - time.monotonic()))
        return subprocess.CompletedProcess(process.args, code, captured[out_read].decode(errors="replace"),
                                           captured[err_read].decode(errors="replace"))


def _descriptor(stream: IO[bytes] | int | None, default: int) -> int:
    if stream is None:
        return default
    return stream if isinstance(stream, int) else stream.fileno()


_shared: dict[int, Zygote] = {}
_starting = threading.Lock()


def zygote() -> Zygote:
    """This test process's zygote, started on first use (a forked child of a test gets its own)."""
    with _starting:
        if os.getpid() not in _shared or _shared[os.getpid()].process.poll() is not None:
            _shared[os.getpid()] = Zygote()
        return _shared[os.getpid()]


# The zygote's side.

def serve(address: str) -> None:
    """Import, then fork a child for each request until standard input closes."""
    for name in WARM_MODULES:
        importlib.import_module(name)
    for package in WARM_PACKAGES:
        for module in pkgutil.iter_modules(importlib.import_module(package).__path__, f"{package}."):
            importlib.import_module(module.name)
    if threading.active_count() != 1:  # a fork would leave those threads' locks held in every child
        raise RuntimeError(f"importing started threads: {threading.enumerate()}")
    gc.collect()
    gc.freeze()  # children need not copy the pages of what every one of them shares
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    selector.register(sys.stdin.buffer, selectors.EVENT_READ, None)
    waiting: dict[int, tuple[socket.socket, int]] = {}  # pidfd -> (the request's channel, the child's pid)
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.fileobj is sys.stdin.buffer:
                if not os.read(sys.stdin.fileno(), 64):
                    return
            elif key.fileobj is listener:
                channel, _ = listener.accept()
                fork(channel, listener, selector, waiting)
            else:
                pidfd = key.fd
                channel, pid = waiting.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                send_quietly(channel, str(os.waitstatus_to_exitcode(status)).encode())
                channel.close()


def fork(channel: socket.socket, listener: socket.socket, selector: selectors.BaseSelector,
         waiting: dict[int, tuple[socket.socket, int]]) -> None:
    """Fork the child ``channel`` asks for, tell it the pid, and watch for the child's end."""
    message, streams, _, _ = socket.recv_fds(channel, MAX_REQUEST_BYTES, 3)
    try:
        request = json.loads(message)
        pid = os.fork()
    except (ValueError, OSError) as error:
        for descriptor in streams:
            os.close(descriptor)
        send_quietly(channel, repr(error).encode())
        channel.close()
        return
    if pid == 0:
        # The child: nothing of the zygote's stays open in it (as subprocess's close_fds).
        selector.close()
        listener.close()
        for pidfd, (other, _) in waiting.items():
            os.close(pidfd)
            other.close()
        channel.close()
        become(request, streams)
    for descriptor in streams:
        os.close(descriptor)
    send_quietly(channel, str(pid).encode())
    pidfd = os.pidfd_open(pid)
    waiting[pidfd] = (channel, pid)
    selector.register(pidfd, selectors.EVENT_READ, None)


def become(request: dict, streams: list[int]) -> NoReturn:
    """Run the requested script in this forked child, as ``python SCRIPT ARGS`` would, and leave."""
    code = 1
    try:
        os.setsid()
        for target, descriptor in enumerate(streams):
            os.dup2(descriptor, target)
        close_inherited_descriptors()
        reopen_standard_streams(*(StreamSettings.of(stream) for stream in (sys.stdin, sys.stdout, sys.stderr)))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if request["niceness"]:
            os.nice(request["niceness"])
        script = request["script"]
        sys.argv = [script, *request["args"]]
        sys.path[0] = str(Path(script).parent)
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as leaving:
        code = exit_code(leaving.code)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # as the interpreter ends on an unhandled Ctrl-C
        flush_standard_streams()
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
    flush_standard_streams()
    os._exit(code)


if __name__ == "__main__":
    serve(sys.argv[1])
