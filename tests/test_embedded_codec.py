"""The embedded default starts a codec server beside the dev server, points the UI at it, and `down` stops it;
its database is kept in WAL mode (``DEV_SERVER_STORAGE_FLAGS``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from config.settings import load_settings
from runtime import embedded
from tests.support.processes import free_port, wait_for_port


def journal_mode(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as connection:
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0])


def test_the_embedded_server_reads_payloads_through_its_codec_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ui_port, address = free_port(), f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("DEERFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("DEERFLOW_UI_PORT", str(ui_port))
    monkeypatch.delenv("DEERFLOW_CODEC_PORT", raising=False)
    stack = embedded.EmbeddedStack(load_settings())  # as a front door loads them; its children load the same
    try:
        stack.start_dev_server(address)
        server = stack.recorded_process("server", address)
        codec = stack.recorded_process("codec", address)
        assert server is not None and codec is not None
        command = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
        endpoint = command[command.index(b"--ui-codec-endpoint") + 1].decode()
        assert endpoint.startswith("http://127.0.0.1:")
        wait_for_port(int(endpoint.rsplit(":", 1)[1]))
        ui = f"http://127.0.0.1:{ui_port}"
        answer = httpx.post(f"{endpoint}/decode", json={"payloads": []}, headers={"Origin": ui})
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == ui
        assert json.loads((tmp_path / "codec.pid").read_text())["address"] == address
        assert not stack.revive_codec_server(address)  # it runs: nothing to do
        # WAL, not the server's rollback journal: a persistence write sits in every workflow task's dispatch
        assert journal_mode(tmp_path / "temporal.db") == "wal"

        os.killpg(codec, signal.SIGKILL)  # it died: the next command brings it back on the UI's port
        while stack.recorded_process("codec", address) is not None:
            time.sleep(0.05)
        assert stack.revive_codec_server(address)
        assert stack.recorded_process("codec", address) not in (None, codec)
        wait_for_port(int(endpoint.rsplit(":", 1)[1]))
    finally:
        stopped = stack.stop()
    assert sorted(stopped) == ["codec", "server"]
    assert stack.recorded_process("codec") is None
