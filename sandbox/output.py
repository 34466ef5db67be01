"""Capturing the code's output: bounded, head and tail kept, and a stop once it is too much."""

from __future__ import annotations

import asyncio


class Capture:
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


class SandboxProtocol(asyncio.SubprocessProtocol):
    """Collects output as it arrives and reports the exit, which does not wait for the pipes."""

    def __init__(self, keep_bytes: int, stop_bytes: int) -> None:
        loop = asyncio.get_running_loop()
        self.captures = {1: Capture(keep_bytes), 2: Capture(keep_bytes)}
        self.stop_bytes = stop_bytes
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
