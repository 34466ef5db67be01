"""The CLI waiting on a worker out loud: a person's decision (review, answer, budget) that no worker
takes, or a status query none answers, is reported as waiting instead of sitting silent, and a
status no worker can give still says where the server's index has the run.

The update and the query are stand-ins: what is under test is the CLI's waiting, not the server's.
"""

from __future__ import annotations

import argparse
import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from cli import research, runs, waiting
from config.settings import Settings
from runtime.front_door import CliError
from workflows.contracts.decisions import Actor
from workflows.contracts.research import ReviewOutcome
from workflows.research.visibility import AWAITING, PHASE

BY = Actor(name="ana", via="cli")
OUTCOME = ReviewOutcome(accepted=True, message="Plan accepted; the research steps will run now.")


class Handle:
    id = "research-x"


def taking(seconds: float):  # type: ignore[no-untyped-def]
    """An update that a worker answers after ``seconds``."""
    async def update(_handle: Any, _value: Any, _by: Actor) -> ReviewOutcome:
        await asyncio.sleep(seconds)
        return OUTCOME
    return update


async def test_a_decision_no_worker_takes_is_reported_as_waiting_and_still_sent(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(waiting, "NOTICE_SECONDS", 0.05)
    outcome = await research._send_update(Handle(), taking(0.3), "[ACCEPTED]", BY, "feedback")  # type: ignore[arg-type]
    assert outcome == OUTCOME
    notice = capsys.readouterr().err
    assert "No worker has taken the feedback for research-x yet; still waiting" in notice
    assert "python worker.py" in notice and "python starter.py status research-x" in notice


async def test_a_decision_taken_at_once_says_nothing_but_its_outcome(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(waiting, "NOTICE_SECONDS", 0.5)
    outcome = await research._send_update(Handle(), taking(0.01), "[ACCEPTED]", BY, "feedback")  # type: ignore[arg-type]
    assert outcome == OUTCOME and capsys.readouterr().err == ""


@pytest.mark.parametrize("notice_after", [10.0, 0.01], ids=["before the notice", "after it"])
async def test_an_interrupted_wait_stops_the_update_call(monkeypatch: pytest.MonkeyPatch, notice_after: float) -> None:
    monkeypatch.setattr(waiting, "NOTICE_SECONDS", notice_after)
    stopped = asyncio.Event()

    async def forever(_handle: Any, _value: Any, _by: Actor) -> ReviewOutcome:
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.set()
        raise AssertionError("unreachable")

    sending = asyncio.ensure_future(research._send_update(Handle(), forever, "[ACCEPTED]", BY, "feedback"))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    sending.cancel()  # Ctrl-C
    with pytest.raises(asyncio.CancelledError):
        await sending
    await asyncio.wait_for(stopped.wait(), 1)


async def sdk_like_update(_handle: Any, _value: Any, _by: Actor) -> ReviewOutcome:
    """As the SDK's ``execute_update`` does: a cancelled wait comes out as its own timeout error."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError as error:
        raise WorkflowUpdateRPCTimeoutOrCancelledError() from error
    raise AssertionError("unreachable")


async def test_ctrl_c_while_waiting_is_one_line_saying_the_decision_may_still_arrive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "NOTICE_SECONDS", 0.01)
    sending = asyncio.ensure_future(research._send_update(Handle(), sdk_like_update, "[ACCEPTED]", BY, "feedback"))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    sending.cancel()  # what asyncio.run does on Ctrl-C
    with pytest.raises(CliError) as stopped:
        await sending
    assert stopped.value.exit_code == 130
    assert str(stopped.value) == ("Stopped waiting: no worker has taken the feedback for research-x yet. The server "
                                  "may still hand it to the next worker: check `python starter.py status research-x` "
                                  "before sending it again.")


async def test_the_servers_own_deadline_on_a_decision_is_the_same_line_with_exit_2() -> None:
    async def deadline(_handle: Any, _value: Any, _by: Actor) -> ReviewOutcome:
        raise WorkflowUpdateRPCTimeoutOrCancelledError()

    with pytest.raises(CliError) as stopped:
        await research._send_update(Handle(), deadline, "[ACCEPTED]", BY, "answer")  # type: ignore[arg-type]
    assert stopped.value.exit_code == 2 and str(stopped.value).startswith("Stopped waiting: no worker has taken the "
                                                                           "answer for research-x yet.")


def described(attributes: TypedSearchAttributes) -> Any:
    raw = SimpleNamespace(pending_workflow_task=SimpleNamespace(attempt=1), pending_activities=[])
    return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING, raw_description=raw,
                           typed_search_attributes=attributes)


@pytest.mark.parametrize(("attributes", "said"), [
    (TypedSearchAttributes([SearchAttributePair(PHASE, "awaiting_review"),
                            SearchAttributePair(AWAITING, "plan_feedback")]),
     " The server's index has it at phase awaiting_review, awaiting plan_feedback."),
    (TypedSearchAttributes([SearchAttributePair(PHASE, "researching")]),
     " The server's index has it at phase researching."),
    (TypedSearchAttributes([SearchAttributePair(PHASE, "\x1b]0;owned\x07researching\x1b[2J")]),
     " The server's index has it at phase researching."),
    (TypedSearchAttributes.empty, ""),
], ids=["awaiting", "working", "terminal controls set by a starter", "not indexed"])
async def test_a_status_no_worker_gives_says_so_while_waiting_and_where_the_index_has_the_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], attributes: TypedSearchAttributes,
        said: str) -> None:
    monkeypatch.setattr(waiting, "NOTICE_SECONDS", 0.05)

    async def connect(_settings: Settings, **_kwargs: Any) -> Any:
        return SimpleNamespace(get_workflow_handle=lambda run_id: SimpleNamespace(id=run_id))

    async def describe(_handle: Any) -> Any:
        return described(attributes)

    async def no_worker(handle: Any) -> Any:
        await asyncio.sleep(0.3)  # the server's half minute
        raise CliError(f"Could not read the status of {handle.id}: no worker answers this run's queries.")

    monkeypatch.setattr(runs, "connect", connect)
    monkeypatch.setattr(runs, "_describe", describe)
    monkeypatch.setattr(runs, "_status", no_worker)
    with pytest.raises(CliError) as raised:
        await runs.status(argparse.Namespace(id="research-x", json=False), Settings())
    assert str(raised.value) == f"Could not read the status of research-x: no worker answers this run's queries.{said}"
    assert "No worker has answered for research-x yet; still waiting" in capsys.readouterr().err
