"""What a process forked from a warm parent does to behave as one started from nothing.

Two forkers share it: the CLI's command server (cli/command_server.py) and the test suite's zygote
(tests/support/zygote.py). Each child gets its caller's standard streams as descriptors 0-2, and
Python's ``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` must be made again for them: a stream keeps
what it learnt of its file when it was opened (whether it can seek, whether it is a terminal), and the
parent's were opened on a log file or /dev/null. The forkers also share how they answer the process
that asked for a child. Imports only the standard library.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class StreamSettings:
    """How the caller's interpreter set up one standard stream: what the child's copy must match, so
    that the same bytes reach the terminal or the pipe as from a process started there."""

    encoding: str
    errors: str
    write_through: bool = False  # ``python -u``

    @classmethod
    def of(cls, stream: io.TextIOWrapper) -> StreamSettings:
        return cls(stream.encoding, stream.errors or "strict", stream.write_through)


def reopen_standard_streams(stdin: StreamSettings, stdout: StreamSettings, stderr: StreamSettings) -> None:
    """``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` made again over descriptors 0, 1 and 2, as a new
    interpreter makes them. Once, the zygote's standard error was its log file where the child's was a
    pipe, and changing that stream's error handler (runtime/text_streams.py, at every command's start)
    sought on the pipe and failed with "Illegal seek"."""
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding=stdin.encoding, errors=stdin.errors)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                  encoding=stdout.encoding, errors=stdout.errors,
                                  line_buffering=os.isatty(1), write_through=stdout.write_through)
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                  encoding=stderr.encoding, errors=stderr.errors, write_through=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def exit_code(code: object) -> int:
    """The status ``SystemExit(code)`` ends an interpreter with (a message is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def flush_standard_streams() -> None:
    """Flush both output streams, whatever became of their files (a reader that left, a closed pipe)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def close_inherited_descriptors() -> None:
    """Close every descriptor above the standard three, as ``subprocess``'s ``close_fds`` would: the
    parent's listener, lock and other callers' sockets are not the child's to keep open."""
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))


def send_quietly(channel: socket.socket, message: bytes) -> None:
    """Answer the process that asked for a child (its pid, how it ended): it may have left already."""
    with contextlib.suppress(OSError):
        channel.send(message)
