"""The loopback fakes send their replies as a real provider's server does.

Why: a fake that answers differently from the real thing measures and tests something else. With
Nagle's algorithm on, a reply's body (written after its headers) waited for the client's delayed
acknowledgement, about 40 ms on loopback, on 4 or 5 of a run's 11 model replies: bench/overhead.py
counted that stall as the worker's hop (offline/loopback_http.py).
"""

from __future__ import annotations

import socket
import socketserver
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Protocol

import httpx
import pytest

from offline.model_server import FakeModelServer
from offline.search_server import FakeSearchServer
from tests.support.fake_http import FakeHTTPServer, Reply


class Fake(Protocol):
    @property
    def base_url(self) -> str: ...


FAKES: dict[str, Callable[[], AbstractContextManager[Fake]]] = {
    "model": FakeModelServer,
    "search": FakeSearchServer,
    "scriptable": lambda: FakeHTTPServer(lambda seen: Reply(200, b"{}")),
}


@pytest.fixture
def reply_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """TCP_NODELAY of every connection a fake answered on, read as its handler finishes."""
    seen: list[int] = []
    finish = socketserver.StreamRequestHandler.finish

    def recording(handler: socketserver.StreamRequestHandler) -> None:
        seen.append(handler.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        finish(handler)

    monkeypatch.setattr(socketserver.StreamRequestHandler, "finish", recording)
    yield seen


@pytest.mark.parametrize("fake", FAKES)
def test_every_fake_replies_with_nagles_algorithm_off(fake: str, reply_sockets: list[int]) -> None:
    with FAKES[fake]() as server:
        with httpx.Client(trust_env=False) as client:
            client.get(f"{server.base_url}/health")
        # The handler finishes in the fake's thread once the client has closed the connection, and
        # stopping the fake does not wait for that thread (a loaded run of the suite read it empty).
        deadline = time.monotonic() + 10
        while not reply_sockets and time.monotonic() < deadline:
            time.sleep(0.01)
    assert reply_sockets and all(reply_sockets), reply_sockets
