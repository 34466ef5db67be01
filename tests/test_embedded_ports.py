"""Ports we pick for servers we start never come from the kernel's ephemeral range.

The dev server picks its internal services' ports with bind(0); a port we chose the same way and
released came back to it, and the dev server panicked on "address already in use" (seen as
``Temporal answered: tcp connect error`` on a busy host). Outside the ephemeral range the two
choices cannot meet.
"""

from __future__ import annotations

import socket

import pytest

from runtime.embedded import _ephemeral_range, free_port


def test_picked_ports_are_outside_the_ephemeral_range_and_free() -> None:
    low, high = _ephemeral_range()
    ports = {free_port() for _ in range(200)}
    assert all(not low <= port <= high for port in ports)
    assert len(ports) > 100  # random, so parallel test workers rarely pick the same one
    for port in list(ports)[:20]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # nothing holds it


def test_a_taken_port_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken_port = taken.getsockname()[1]
        monkeypatch.setattr("runtime.embedded.FIXED_PORTS", range(taken_port, taken_port + 1))
        monkeypatch.setattr("runtime.embedded._ephemeral_range", lambda: (1, 2))
        assert free_port() != taken_port
