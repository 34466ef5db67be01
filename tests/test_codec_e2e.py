"""Acceptance of issue #10 items 2 and 3: an encrypted run nobody can read without the key, except
through the codec server, whose Web UI page shows the stored report and a researcher's input.

One real run (the offline model, a loopback page it crawls, a real worker process with encryption
on and a low payload threshold, so the report and the researcher's conversations go to the blob
store) on a dev server whose database file the test reads, whose Web UI uses a real
``starter.py codec-server`` process. Then: the question, a report phrase and the crawled page's
text are nowhere in plaintext (history bytes, the server's database, the blobs); the codec server
reveals all three; the history replays with the decrypting converter; headless Chromium shows
the report and a researcher's input on the run's Web UI page.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from config.settings import load_settings
from runtime import research_client
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.embedded import search_attribute_flags
from runtime.encryption import encryption_codec
from storage.subtrees import references_in
from tests.support.cdp import Page
from tests.support.deployments import PAGE_PHRASE, providers
from tests.support.fake_http import FakeHTTPServer
from tests.support.processes import REPO_DIR, DevServer, free_port, start_worker, wait_for_port
from tests.support.runs import QUESTION, run_id
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.research import Outcome, ResearchRequest, ResearchResult
from workflows.research.workflow import DeepResearchWorkflow

pytestmark = pytest.mark.timeout(300)  # a loaded 2-core machine: the run and the UI can each take a minute

KEYS = f"e2e-2026:{base64.b64encode(os.urandom(32)).decode()},e2e-old:{base64.b64encode(os.urandom(32)).decode()}"
# The page's text including same-origin frames (the UI renders some details in an iframe).
ALL_TEXT = """() => [document, ...[...document.querySelectorAll('iframe')].map((f) => f.contentDocument)]
  .filter((d) => d && d.body).map((d) => d.body.innerText).join('\\n')"""


@dataclass
class World:
    dev: DevServer
    codec_url: str
    env: dict[str, str]  # the worker's and the codec server's settings (by env name)
    site: FakeHTTPServer

    @property
    def home(self) -> Path:
        return Path(self.env["DEERFLOW_HOME"])


@dataclass
class FinishedRun:
    workflow_id: str
    result: ResearchResult
    history: WorkflowHistory


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("codec-e2e")
    with contextlib.ExitStack() as stack:
        fakes = stack.enter_context(providers(root))
        codec_port = free_port()
        dev = DevServer(root / "temporal.db", extra_args=[
            "--ui-codec-endpoint", f"http://127.0.0.1:{codec_port}", *search_attribute_flags()]).start()
        stack.callback(dev.stop)
        env = {"DEERFLOW_HOME": str(root / "home"), "DEERFLOW_ENCRYPTION_KEYS": KEYS,
               "DEERFLOW_UI_PORT": str(dev.ui_port), **fakes.env}
        codec = subprocess.Popen(
            [sys.executable, str(REPO_DIR / "starter.py"), "codec-server", "--port", str(codec_port)],
            env={**os.environ, **env}, cwd=REPO_DIR, stdout=subprocess.DEVNULL,
            stderr=(root / "codec.log").open("wb"), start_new_session=True)
        stack.callback(lambda: (codec.terminate(), codec.wait(timeout=10)))
        wait_for_port(codec_port)
        yield World(dev, f"http://127.0.0.1:{codec_port}", env, fakes.site)


@pytest.fixture(scope="module")
async def client(world: World) -> Client:
    return await connect_when_ready(world.dev.address, data_converter=data_converter(load_settings(world.env)))


@pytest.fixture(scope="module")
async def finished(world: World, client: Client, tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    worker = await start_worker(world.dev, client, tmp_path_factory.mktemp("codec-worker") / "worker.log",
                                **world.env)
    try:
        workflow_id = run_id("encrypted")
        # As every starter does: the memo (encrypted) and the search attributes, which hold no question here.
        handle = await research_client.start(
            client, ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1), run_id=workflow_id,
            summary="encrypted run", started_by=Actor(name="tester", via=Via.CLI))
        result = await handle.result()
    finally:
        worker.stop()
    assert result.outcome is Outcome.REPORT and world.site.requests, "the run must crawl the page and report"
    return FinishedRun(workflow_id, result, await handle.fetch_history())


def report_phrase(result: ResearchResult) -> str:
    """The report's longest line without quotes or backslashes: text only the reporter wrote
    (checked below to be long), which reads the same raw and inside a JSON payload (a quoted line
    would be escaped there, and neither finding it nor proving it absent would mean anything)."""
    line = max((line.strip() for line in (result.report or "").splitlines() if not {'"', "\\"} & set(line)),
               key=len)
    assert len(line) > 60, result.report
    return line


def needles(run: FinishedRun) -> dict[str, bytes]:
    return {"question": QUESTION.encode(), "report": report_phrase(run.result).encode(),
            "page": PAGE_PHRASE.encode()}


def history_payloads(history: WorkflowHistory) -> list[dict[str, Any]]:
    """Every payload of the history in protobuf JSON, as the Web UI sends them to the codec server."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("metadata"), dict) and "encoding" in node["metadata"]:
                found.append(node)
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(history.to_json_dict())
    return found


def assert_unreadable(place: str, data: bytes, run: FinishedRun) -> None:
    for name, needle in needles(run).items():
        assert needle not in data, f"the {name} text is in plaintext in {place}"


def test_history_holds_no_plaintext(finished: FinishedRun) -> None:
    data = History(events=finished.history.events).SerializeToString()
    assert finished.workflow_id.encode() in data  # the grep sees plaintext where there is some
    assert_unreadable("history", data, finished)


def test_the_servers_database_holds_no_plaintext(world: World, finished: FinishedRun) -> None:
    files = sorted(world.dev.db_path.parent.glob(world.dev.db_path.name + "*"))
    data = b"".join(path.read_bytes() for path in files)
    assert finished.workflow_id.encode() in data, [path.name for path in files]
    assert_unreadable("the dev server's database", data, finished)


def test_the_blobs_hold_no_plaintext(world: World, finished: FinishedRun) -> None:
    blobs = [path.read_bytes() for path in (world.home / "blobs").rglob("*") if path.is_file()]
    assert len(blobs) >= 3  # the report and researcher conversations went to the store
    assert all(blob.count(b"binary/encrypted") == 1 for blob in blobs)
    assert_unreadable("the blob store", b"".join(blobs), finished)


async def test_the_codec_server_reads_it_all(world: World, finished: FinishedRun) -> None:
    payloads = history_payloads(finished.history)
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{world.codec_url}/decode", json={"payloads": payloads})
    assert response.status_code == 200, response.text
    decoded = b"\n".join(base64.b64decode(item.get("data", "")) for item in response.json()["payloads"])
    for name, needle in needles(finished).items():
        assert needle in decoded, f"the codec server did not reveal the {name} text"


def test_the_temporal_cli_reads_it_through_the_codec_server(world: World, finished: FinishedRun) -> None:
    show = ("workflow", "show", "--workflow-id", finished.workflow_id)
    sealed = world.dev.cli(*show)
    assert sealed.returncode == 0, sealed.stderr
    assert "Zephyrite" not in sealed.stdout  # the result: a reference to an encrypted blob
    opened = world.dev.cli(*show, "--codec-endpoint", world.codec_url)
    assert opened.returncode == 0, opened.stderr
    assert PAGE_PHRASE in opened.stdout and "ResultEncoding  json/plain" in opened.stdout


async def test_the_history_replays_with_the_decrypting_converter(world: World, finished: FinishedRun) -> None:
    replayer = Replayer(workflows=[DeepResearchWorkflow], data_converter=data_converter(load_settings(world.env)))
    outcome = await replayer.replay_workflow(finished.history, raise_on_replay_failure=False)
    assert outcome.replay_failure is None, outcome.replay_failure


async def researcher_turn(world: World, finished: FinishedRun) -> int:
    """The id of a researcher's last chat turn of step 1 (its input holds the crawled page), found by summary."""
    converter = data_converter(load_settings(world.env))
    for event in finished.history.events:
        if event.HasField("activity_task_scheduled_event_attributes") and event.user_metadata.HasField("summary"):
            [summary] = await converter.decode([event.user_metadata.summary])
            if summary == "researcher · step 1 · turn 3":
                return event.event_id
    raise AssertionError("no researcher turn in the history")


async def test_the_web_ui_shows_the_stored_report_and_a_researchers_input(
        world: World, finished: FinishedRun, page: Page, tmp_path: Path) -> None:
    events = {event.event_id: event for event in finished.history.events}
    [completed] = [event.workflow_execution_completed_event_attributes for event in events.values()
                   if event.HasField("workflow_execution_completed_event_attributes")]
    researcher = await researcher_turn(world, finished)
    # Both are only references in history: what the UI shows below comes from the blob store. The
    # report is a whole-payload reference; the researcher's input, once decrypted, holds subtree references.
    assert completed.result.payloads[0].metadata["encoding"] == b"json/protobuf"
    encryption = encryption_codec(load_settings(world.env))
    assert encryption is not None
    [turn_input] = await encryption.decode(events[researcher].activity_task_scheduled_event_attributes.input.payloads)
    assert references_in(turn_input), turn_input.metadata
    base = (f"http://127.0.0.1:{world.dev.ui_port}/namespaces/default/workflows/{finished.workflow_id}/"
            f"{finished.history.run_id}")
    text = f"({ALL_TEXT})()"
    heading = (finished.result.report or "").splitlines()[0]
    try:
        await page.open_until(f"{base}/history", f"{text}.includes({json.dumps(heading)})", 120,
                              what="the report as the run's result")
        shown = str(await page.evaluate(text))
        assert PAGE_PHRASE in shown and QUESTION in shown and "claimData" not in shown
        await page.screenshot(tmp_path / "1-result.png")

        await page.open_until(f"{base}/history/events/{researcher}", f"{text}.includes('\"prompt\": \"researcher\"')",
                              120, what="the researcher's input")
        shown = str(await page.evaluate(text))
        assert "read one page in full" in shown and "Background and key facts" in shown
        assert "claimData" not in shown and "binary/encrypted" not in shown and "$subtree" not in shown
    except Exception:
        await page.screenshot(tmp_path / "failure.png")  # what the browser showed when it went wrong
        raise
