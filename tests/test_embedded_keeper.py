"""``starter.py serve`` on the embedded default keeps its worker: a worker killed under a page's run
is replaced without any command being typed, the run goes on to its report, and a stack stopped
with ``starter.py down`` stays stopped.

Real processes: the API server, the dev server and the workers it starts, on a private home and
free loopback ports, with the offline demonstration model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from temporalio.client import Client

from config.settings import load_settings
from offline.providers import without_provider_settings
from runtime import embedded, embedded_keeper
from runtime.embedded import EmbeddedStack, _start_time, is_listening
from tests.support.processes import REPO_DIR, free_port, kill_group, run_starter, wait_for_port

pytestmark = pytest.mark.timeout(240)
QUESTION = "What is rain?"
REVIVAL_SECONDS = 15.0  # the keeper's 2 s check plus a worker's start (1-3 s idle), stretched by load


def revival_bound() -> float:
    """The bound on an idle machine, stretched by how oversubscribed the cores are (a worker's start
    is about 3 s of CPU); the measured time is printed either way."""
    return REVIVAL_SECONDS * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


@pytest.fixture
def home(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A fresh machine's environment: no keys, no configured server, a private home, free ports."""
    env = {key: value for key, value in without_provider_settings(os.environ).items()
           if key != "TEMPORAL_ADDRESS" and not key.startswith("DEERFLOW_WEB_")}
    env.update(DEERFLOW_HOME=str(tmp_path / "home"), DEERFLOW_UI_PORT=str(free_port()),
               DEERFLOW_EMBEDDED_ADDRESS=f"127.0.0.1:{free_port()}", DEERFLOW_OFFLINE_MODEL_LATENCY="0.05")
    try:
        yield env
    finally:
        subprocess.run([sys.executable, str(REPO_DIR / "starter.py"), "down"], env=env, cwd=REPO_DIR,
                       capture_output=True, timeout=60, check=False)


def recorded_worker(home: dict[str, str]) -> int | None:
    try:
        return int(json.loads((Path(home["DEERFLOW_HOME"]) / "worker.pid").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


async def until(condition, seconds: float, what: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``condition()`` held (polled every 0.1 s); fails after ``seconds``."""
    began = time.monotonic()
    while not await condition():
        assert time.monotonic() - began < seconds, f"{what}: not within {seconds:.0f} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - began


async def test_serve_replaces_a_killed_worker_and_leaves_a_stack_that_was_taken_down(
        home: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("ab") as output:
        serve = subprocess.Popen([sys.executable, str(REPO_DIR / "starter.py"), "serve", "--port", str(port)],
                                 env=home, cwd=REPO_DIR, stdout=output, stderr=output, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        await asyncio.to_thread(wait_for_port, port, 120)
        first = recorded_worker(home)
        assert first is not None, log.read_text()
        async with httpx.AsyncClient(timeout=60) as http:
            run = (await http.post(f"{base}/api/runs", json={"question": QUESTION})).json()["id"]

            async def awaiting_review() -> bool:
                shown = (await http.get(f"{base}/api/runs/{run}")).json()
                return bool(shown["run"]) and shown["run"]["awaiting"] == "plan_feedback"

            await until(awaiting_review, 120, "the run awaiting its review")
            kill_group(first)

            temporal = await Client.connect(home["DEERFLOW_EMBEDDED_ADDRESS"])

            async def replaced() -> bool:  # a new process of ours polls the queue
                pid = recorded_worker(home)
                return pid not in (None, first) and await embedded.process_polls(temporal, pid)

            revived = await until(replaced, 120, "a new worker polling")
            bound = revival_bound()
            print(f"a new worker polled {revived:.1f} s after the kill; bound {bound:.0f} s")
            assert revived < bound, log.read_text()
            reviewed = await http.post(f"{base}/api/runs/{run}/review", json={"accept": True})
            assert reviewed.status_code == 200 and reviewed.json()["accepted"] is True, reviewed.text

            async def reported() -> bool:
                return (await http.get(f"{base}/api/runs/{run}")).json()["status"] == "completed"

            await until(reported, 120, "the run's report")
            result = (await http.get(f"{base}/api/runs/{run}")).json()["result"]
            assert result["report"], result
        assert "Revived the embedded worker" in log.read_text()

        # The codec server killed (the Web UI reads payloads through it): back on its port.
        codec = json.loads((Path(home["DEERFLOW_HOME"]) / "codec.pid").read_text())["pid"]
        kill_group(codec)

        async def codec_back() -> bool:
            return "Revived the embedded codec server" in log.read_text()

        await until(codec_back, 60, "a new codec server")
        codec_again = json.loads((Path(home["DEERFLOW_HOME"]) / "codec.pid").read_text())["pid"]
        assert codec_again != codec

        # The dev server killed: the keeper starts it again on the same database, which holds the run.
        server = json.loads((Path(home["DEERFLOW_HOME"]) / "server.pid").read_text())["pid"]
        kill_group(server)
        async with httpx.AsyncClient(timeout=60) as http:

            async def served_again() -> bool:
                try:
                    return (await http.get(f"{base}/api/runs/{run}")).json()["status"] == "completed"
                except (httpx.HTTPError, ValueError, KeyError):
                    return False

            back = await until(served_again, 120, "the run read again through a new dev server")
            print(f"the run was read through a new dev server {back:.1f} s after the kill")
        assert "Revived the embedded Temporal dev server" in log.read_text()
        # The codec server outlived its dev server: the new one uses it, rather than a second one.
        assert json.loads((Path(home["DEERFLOW_HOME"]) / "codec.pid").read_text())["pid"] == codec_again

        downed = await asyncio.to_thread(run_starter, home, "down")
        assert downed.returncode == 0 and "worker" in downed.stdout, downed.stderr
        await asyncio.sleep(3 * 2.0 + 1)  # three of the keeper's checks
        address = home["DEERFLOW_EMBEDDED_ADDRESS"]
        assert not is_listening(address) and recorded_worker(home) is None, log.read_text()[-2000:]
        assert _start_time(codec_again) is None, "a codec server outlived starter.py down"
    finally:
        serve.kill()
        serve.wait(timeout=30)


async def test_a_failed_revival_is_tried_again_less_and_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes: list[Exception | list[str]] = [RuntimeError("no"), RuntimeError("no"), ["worker"], RuntimeError("no")]
    waits: list[float] = []

    async def revive(*_: object) -> list[str]:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def sleep(seconds: float) -> None:
        if not outcomes:
            raise asyncio.CancelledError
        waits.append(seconds)

    monkeypatch.setattr(embedded_keeper, "load_connection", lambda _: SimpleNamespace(embedded=True, address="x"))
    monkeypatch.setattr(embedded_keeper, "revive_dead_parts", revive)
    monkeypatch.setattr(embedded_keeper.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        await embedded_keeper.keep_embedded(None, load_settings({}), interval=2.0)  # type: ignore[arg-type]
    assert waits == [2.0, 4.0, 8.0, 2.0]  # doubled after each failure, back to the interval after a success


def test_down_leaves_a_mark_that_the_next_start_of_any_part_removes(tmp_path: Path) -> None:
    stack = EmbeddedStack(load_settings({"DEERFLOW_HOME": str(tmp_path)}))
    assert not stack.is_down()
    assert stack.stop() == []  # nothing ran: still marked, so a keeper starts nothing
    assert stack.is_down()
    pid = stack._spawn("worker", [sys.executable, "-c", "pass"], "127.0.0.1:1")
    assert not stack.is_down()
    with contextlib.suppress(ChildProcessError):  # the suite may have reaped it already
        os.waitpid(pid, 0)
