"""``starter.py inspect`` read from history files (runtime/inspection*.py, cli/inspection*.py): every
call in its stage with its input, output, attempts and usage; who decided what; hostile text shown
as text on a terminal and in the HTML page; secrets scrubbed; encrypted histories read with the
keys and reported without them. The live server, real workers and the page are in
tests/test_inspection_e2e.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo

import starter
from cli.inspection_html import POLICY, render_html
from cli.inspection_text import render
from config.settings import load_settings
from runtime.activity_io import runs_call
from runtime.converter import data_converter
from runtime.inspection_model import ForkLink, RunInspection
from runtime.inspection_source import attempt_in_flight, inspect_histories, inspect_run
from tests.support.history_checks import HISTORIES, load
from tests.support.history_events import HistoryWriter
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse, ToolCall
from workflows.contracts.research import ResearchRequest
from workflows.contracts.tool_activities import SearchRequest, SearchResponse, SearchResult

SETTINGS = load_settings({"DEERFLOW_PAYLOAD_STORE": "none"})
KEY = base64.b64encode(os.urandom(32)).decode()
HOSTILE = ("\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J<script>alert(1)</script></pre><img src=http://127.0.0.2/x "
           "onerror=alert(2)><a href=javascript:alert(3)>click</a>\u202etxt.exe")


async def inspected(name: str) -> RunInspection:
    return await inspect_histories([load(HISTORIES / f"{name}.json")], data_converter(SETTINGS), "file")


async def test_every_call_of_a_run_is_shown_in_its_stage_with_the_planner_s_prompt_and_reply() -> None:
    history = load(HISTORIES / "accepted_plan.json")
    inspection = await inspected("accepted_plan")
    scheduled = [event.event_id for event in history.events
                 if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert [call.event_id for call in inspection.calls] == scheduled
    assert [stage.key for stage in inspection.stages] == [
        "setup", "coordinator", "background investigation", "planner · v1", "plan review · 0.38", "step 1", "step 2",
        "step 3", "reporter"]
    assert all(call.state == "completed" and call.attempts == 1 and call.duration_seconds is not None
               for call in inspection.calls)
    [planner] = next(stage for stage in inspection.stages if stage.key == "planner · v1").calls
    prompt = {part.label: part.text for part in planner.input}
    assert prompt["prompt"].startswith("prompts/planner.md")
    assert "solid-state batteries" in prompt["1. user"]
    assert "background_investigation" in " ".join(prompt)  # the background search's results, as a message
    [reply] = [part for part in planner.output if part.label == "reply"]
    assert json.loads(reply.text)["steps"]
    assert planner.usage is not None and planner.usage.total_tokens > 0
    # The researcher's search ran in its step; its second turn shows only what the first did not.
    step = next(stage for stage in inspection.stages if stage.key == "step 1")
    assert [call.activity for call in step.calls] == ["chat", "web_search", "chat"]
    assert step.title.startswith("step 1 · researcher: ")
    second = [part.label for part in step.calls[2].input]
    assert "earlier messages" in second and "1. user" not in second
    assert inspection.input_tokens == sum(call.usage.input_tokens for call in inspection.calls if call.usage)
    assert inspection.result[0].text == "report" and inspection.status == "completed"


async def test_who_decided_what_and_when() -> None:
    inspection = await inspected("named_reviewers")
    said = [(message.kind, message.text, message.by) for message in inspection.messages]
    assert said == [("signal plan_feedback", "[EDIT_PLAN] add a step on manufacturing costs", "alice (cli)"),
                    ("signal plan_feedback", "[ACCEPTED]", "bob (api)")]
    reviews = [stage for stage in inspection.stages if stage.key.startswith("plan review")]
    assert [[message.by for message in stage.messages] for stage in reviews] == [["alice (cli)"], ["bob (api)"]]
    assert all(stage.waits[0].ended == "answered" for stage in reviews)
    assert "signal plan_feedback from alice (cli)" in render(inspection)


async def retried_and_failed(converter: object) -> HistoryWriter:
    """A run whose planner call failed twice on the provider and then for good."""
    writer = HistoryWriter(converter)  # type: ignore[arg-type]
    await writer.started(ResearchRequest(question="Why do tides rise twice a day?"))
    call = await writer.scheduled("chat", ChatRequest(prompt="planner", messages=[
        ChatMessage(role="user", content="Why do tides rise twice a day?")]), "planner · v1")
    await writer.attempt(call, attempt=3, last_failure="503 Service Unavailable from the provider")
    await writer.failed(call, "quota exceeded: try again tomorrow")
    return writer


async def test_a_retried_call_shows_its_attempts_and_failures() -> None:
    writer = await retried_and_failed(data_converter(SETTINGS))
    inspection = await inspect_histories([writer.history()], data_converter(SETTINGS), "file")
    [call] = inspection.calls
    assert (call.state, call.attempts, call.worker) == ("failed", 3, "4242@worker-a")
    assert [(failure.attempt, failure.message) for failure in call.failures] == [
        (2, "ModelProviderError: 503 Service Unavailable from the provider"),
        (3, "ModelProviderError: quota exceeded: try again tomorrow")]
    assert "attempt 2 failed: ModelProviderError: 503" in render(inspection)


def test_a_tool_input_that_did_not_decode_as_its_request_runs_no_call() -> None:
    """The inspection reads an input that is not its activity's request as plain JSON: no model tool
    call is paired with it, and pairing the others goes on (the feed reads the same pairing)."""
    search = ToolCall(id="call_1", name="web_search", arguments={"query": "tides"})
    assert runs_call(search, "web_search", SearchRequest(query="tides"))
    assert not runs_call(search, "web_search", {"query": "tides"})
    assert not runs_call(search, "crawl_tool", {"url": "https://example.org"})
    assert not runs_call(search, "mcp_call_tool", {"arguments": {"query": "tides"}})


async def hostile_run() -> HistoryWriter:
    writer = HistoryWriter(data_converter(SETTINGS))
    await writer.started(ResearchRequest(question="What do tidal lagoons cost?"))
    search = await writer.scheduled("web_search", SearchRequest(query=f"tidal {HOSTILE}"), "web_search: tidal")
    await writer.attempt(search)
    await writer.completed(search, SearchResponse(query="tidal", results=[
        SearchResult(title=f"Lagoons {HOSTILE}", url="javascript:alert(4)", content=HOSTILE)]))
    await writer.signaled("plan_feedback", f"[EDIT_PLAN] {HOSTILE}", {"name": "mallory", "via": "api"})
    return writer


async def test_hostile_text_is_shown_as_text_on_a_terminal() -> None:
    inspection = await inspect_histories([(await hostile_run()).history()], data_converter(SETTINGS), "file")
    text = render(inspection)
    assert "<script>alert(1)</script>" in text  # shown, as text
    for control in ("\x1b", "\x07", "\u202e"):
        assert control not in text


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


async def test_the_html_page_loads_nothing_and_shows_hostile_text_as_text() -> None:
    inspection = await inspect_histories([(await hostile_run()).history()], data_converter(SETTINGS), "file")
    page = render_html(inspection)
    parsed = Tags()
    parsed.feed(page)
    tags = {tag for tag, _ in parsed.tags}
    assert tags <= {"html", "head", "meta", "title", "style", "body", "h1", "p", "details", "summary", "div", "pre"}
    attributes = {name for _, attrs in parsed.tags for name, _ in attrs}
    assert attributes <= {"lang", "charset", "http-equiv", "content", "name", "class", "open"}
    assert "url(" not in page and "@import" not in page
    [policy] = [dict(attrs)["content"] for tag, attrs in parsed.tags if dict(attrs).get("http-equiv")]
    assert policy == POLICY and policy.startswith("default-src 'none'; style-src 'sha256-")
    shown = "".join(parsed.text)
    assert HOSTILE in shown  # every character of it, as text
    assert "mallory (api)" in shown


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str,
            **env: str) -> tuple[int, str, str]:
    monkeypatch.setenv("DEERFLOW_ENV_FILE", os.devnull)
    monkeypatch.setenv("DEERFLOW_PAYLOAD_STORE", "none")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = starter.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_secrets_are_scrubbed_from_every_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    secret = "sk-live-0123456789abcdef"
    writer = HistoryWriter(data_converter(SETTINGS))
    asyncio.run(writer.started(ResearchRequest(question=f"Is my key {secret} valid?")))
    exported = tmp_path / "run.json"
    exported.write_text(writer.history().to_json())
    page = tmp_path / "run.html"
    for view in ([], ["--json"], ["--html", str(page)]):
        code, out, _ = run_cli(monkeypatch, capsys, "inspect", "--file", str(exported), *view,
                               SUPPORT_DESK_TOKEN=secret)
        shown = page.read_text() if view[:1] == ["--html"] else out
        assert code == 0 and secret not in shown and "[redacted]" in shown, view


def test_json_is_the_same_inspection_as_data(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "inspect", "--file", str(HISTORIES / "accepted_plan.json"), "--json")
    assert code == 0
    shown = RunInspection.model_validate_json(out)
    assert shown.workflow_id == f"the run in {HISTORIES / 'accepted_plan.json'}"  # the file names no workflow ID
    same = {"source": shown.source, "workflow_id": shown.workflow_id}
    assert shown == asyncio.run(inspected("accepted_plan")).model_copy(update=same)


def test_an_encrypted_history_is_read_with_the_keys_and_reported_without(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    keyed = load_settings({"DEERFLOW_PAYLOAD_STORE": "none", "DEERFLOW_ENCRYPTION_KEYS": f"k1:{KEY}"})
    writer = asyncio.run(retried_and_failed(data_converter(keyed)))
    exported = tmp_path / "run.json"
    exported.write_text(writer.history().to_json())
    assert b"tides" not in exported.read_bytes() and b"quota" not in exported.read_bytes()

    code, out, _ = run_cli(monkeypatch, capsys, "inspect", "--file", str(exported),
                           DEERFLOW_ENCRYPTION_KEYS=f"k1:{KEY}")
    assert code == 0 and "Why do tides rise twice a day?" in out and "quota exceeded" in out
    monkeypatch.delenv("DEERFLOW_ENCRYPTION_KEYS")
    code, out, _ = run_cli(monkeypatch, capsys, "inspect", "--file", str(exported))
    assert code == 0 and "Why do tides" not in out
    assert "Problem: a payload could not be read" in out and "DEERFLOW_ENCRYPTION_KEYS" in out


async def test_a_fork_s_link_is_shown_by_every_view() -> None:
    inspection = (await inspected("direct_reply")).model_copy(
        update={"forked_from": ForkLink(workflow_id="research-source", at="step 2"),
                "forks": [ForkLink(workflow_id="research-fork-b", at="report")]})
    for shown in (render(inspection), render_html(inspection)):
        assert "Forked from research-source at step 2" in shown and "Forked as research-fork-b at report" in shown


async def test_a_response_s_tool_calls_and_ending_are_shown() -> None:
    writer = HistoryWriter(data_converter(SETTINGS))
    await writer.started(ResearchRequest(question="q"))
    turn = await writer.scheduled("chat", ChatRequest(prompt="researcher"), "researcher · step 1 · turn 1")
    await writer.attempt(turn)
    await writer.completed(turn, ChatResponse(message=ChatMessage(role="assistant", content=""), truncated=True,
                                              output_cap=512, finish_reason="length"))
    inspection = await inspect_histories([writer.history()], data_converter(SETTINGS), "file")
    [ending] = inspection.calls[0].output
    assert ending.text == "finish reason: length · cut at its output cap (512 tokens)"


async def test_a_run_that_continued_as_new_is_inspected_whole(worker_with: WorkerWith,
                                                              provider_env: dict[str, str]) -> None:
    async with worker_with(settings_with(provider_env, DEERFLOW_CONTINUE_AS_NEW_EVENTS="40")) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=4)
        await handle.result()
        inspection = await inspect_run(client, handle.id, "the time-skipping server")
        runs = [await client.get_workflow_handle(handle.id, run_id=run).fetch_history()
                for run in inspection.run_ids]
    assert len(runs) >= 2 and inspection.run_ids[0] == handle.result_run_id
    assert runs[0].events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    scheduled = [f"{position}.{event.event_id}" for position, history in enumerate(runs) for event in history.events
                 if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert [call.id for call in inspection.calls] == scheduled
    assert {"step 1", "step 2", "step 3", "step 4", "reporter"} <= {stage.key for stage in inspection.stages}
    assert inspection.status == "completed" and inspection.result[0].text.startswith("report")
    assert all(call.state == "completed" for call in inspection.calls)


async def test_a_live_run_s_attempt_in_flight_shows_its_retries() -> None:
    writer = HistoryWriter(data_converter(SETTINGS))
    await writer.started(ResearchRequest(question="Why do tides rise twice a day?"))
    await writer.scheduled("web_search", SearchRequest(query="tides"), "web_search: tides")
    info = PendingActivityInfo(activity_id="2", attempt=3, state=PendingActivityState.PENDING_ACTIVITY_STATE_STARTED)
    info.last_failure.CopyFrom(await writer.failure("search provider answered 503"))
    info.last_started_time.FromDatetime(datetime(2026, 12, 1, 9, 5, tzinfo=UTC))
    pending = await attempt_in_flight(data_converter(SETTINGS), info)
    inspection = await inspect_histories([writer.history()], data_converter(SETTINGS), "server", [pending])
    [call] = inspection.calls
    assert (call.state, call.attempts, call.closed_at) == ("running", 3, None)
    assert call.failures[0].attempt == 2 and "503" in call.failures[0].message
    assert "in flight" in render(inspection) and inspection.stages[0].ended_at is None
