"""``starter.py serve`` stopped by a signal withdraws its token-stream announcement.

Why a real process: uvicorn shuts down on SIGTERM or SIGINT and then raises the signal again, which
ends the process before any ``finally`` of ``serve`` runs. An announcement left behind under
``DEERFLOW_HOME`` sends every later local worker's token previews to a dead address, so only a
process that receives the signal shows whether the withdrawal happens (server/serve.py).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from runtime.token_stream_format import ANNOUNCEMENT, PATH
from tests.support.processes import DevServer, ServeProcess, free_port

pytestmark = pytest.mark.timeout(90)


def wait_for_file(path: Path, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path.name} after {timeout} s"
        time.sleep(0.05)
    return json.loads(path.read_text())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_stopped_server_leaves_no_announcement(dev_server: DevServer, tmp_path: Path, sig: signal.Signals) -> None:
    home = tmp_path / "home"  # its own DEERFLOW_HOME: never the checkout's .deerflow
    port = free_port()
    server = ServeProcess(dev_server.address, port, tmp_path / "serve.log", home)
    try:
        announced = wait_for_file(home / ANNOUNCEMENT)
        assert announced["url"] == f"http://127.0.0.1:{port}{PATH}"
        server.stop(sig)
    finally:
        server.kill()
    assert not (home / ANNOUNCEMENT).exists(), (tmp_path / "serve.log").read_text()
    assert list(home.glob(f".{ANNOUNCEMENT}.*")) == []  # nor a half-written one
