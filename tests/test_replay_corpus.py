"""``history --as-test`` (cli/replay_corpus.py): the operator's secrets leave every string of a history,
payload bytes included, as written and as JSON escapes them; the corpus file's name is safe and never
replaces one. End to end: tests/test_fleet_replay_e2e.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter

from cli.replay_corpus import corpus_path, scrubbed, scrubber_of
from config.settings import load_settings
from runtime.blob_gc import payloads_in
from runtime.converter import data_converter
from runtime.front_door import CliError
from tests.support.history_events import HistoryWriter
from workflows.contracts.research import ResearchRequest

SECRET = 'sk-"quoted"\\key-0123456789'


def history_quoting(secret: str):  # type: ignore[no-untyped-def]
    writer = HistoryWriter(data_converter(load_settings({"DEERFLOW_PAYLOAD_STORE": "none"})))

    async def write() -> None:
        await writer.started(ResearchRequest(question=f"Why does {secret} fail?"))
        call = await writer.scheduled("chat", {"prompt": "planner"}, "planner · v1")
        await writer.attempt(call, attempt=2, last_failure=f"401: key {secret} refused")
        await writer.failed(call, f"401: key {secret} refused again")

    asyncio.run(write())
    return writer.history()


def test_secrets_leave_payloads_and_failure_messages() -> None:
    history = history_quoting(SECRET)
    texts = [payload.data for event in history.events for payload in payloads_in(event)]
    assert any(b'\\"quoted\\"' in data for data in texts)  # in the payload as JSON escapes it
    assert any(SECRET in event.activity_task_failed_event_attributes.failure.message for event in history.events)
    clean = scrubbed(history, scrubber_of(load_settings({"DEERFLOW_PAYLOAD_STORE": "none",
                                                         "SUPPORT_DESK_TOKEN": SECRET})))
    written = clean.to_json()
    assert "quoted" not in written and "quoted" not in str(
        [payload.data for event in clean.events for payload in payloads_in(event)])
    assert "[redacted]" in clean.events[-1].activity_task_failed_event_attributes.failure.message
    assert history.events[-1].activity_task_failed_event_attributes.failure.message.count(SECRET) == 1  # untouched
    [request] = asyncio.run(pydantic_data_converter.decode(clean.events[0].workflow_execution_started_event_attributes
                                                           .input.payloads, [ResearchRequest]))
    assert request.question == "Why does [redacted] fail?"  # still the same JSON, still a request


def test_the_corpus_file_is_named_safely_and_never_replaces_one(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tests" / "histories").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    path = corpus_path("../../etc/passwd research-é1")
    assert path.parent == tmp_path / "tests" / "histories" and path.name == "etc_passwd_research-_1.json"
    path.write_text("{}")
    with pytest.raises(CliError, match="exists"):
        corpus_path("../../etc/passwd research-é1")
    monkeypatch.chdir(tmp_path / "tests")
    with pytest.raises(CliError, match="top folder"):
        corpus_path("x")
