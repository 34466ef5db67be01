"""Signals the run cannot use (issue #13 item 5): not a string, not the protocol, none or two inputs,
or not awaited now. Each is dropped without failing a workflow task, and recorded as an "ignored"
event with the reason, so whoever sent it can see why in ``status``; a flood keeps only a few.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tests.support.history_checks import HISTORIES, load
from tests.support.runs import IGNORED_SIGNALS, awaiting_review, start, wait_for
from workflows.contracts.research import Outcome
from workflows.contracts.status import MAX_IGNORED_EVENTS, RunStatus

# (signal, its arguments, text the ignored event must contain)
BAD_SIGNALS: list[tuple[str, list[Any], str]] = [
    ("plan_feedback", [42], "plan_feedback: feedback must be a string, got int"),
    ("plan_feedback", ["nonsense"], "feedback must start with [ACCEPTED] or [EDIT_PLAN]"),
    ("plan_feedback", [{"accepted": True}], "feedback must be a string, got dict"),
    ("plan_feedback", [None], "feedback must be a string, got NoneType"),
    ("plan_feedback", [], "expected one JSON string (and optionally its sender), got 0 inputs"),
    ("plan_feedback", ["[ACCEPTED]", "[ACCEPTED]"], "the sender must be an object with name and via"),
    ("plan_feedback", ["[ACCEPTED]", {"name": "mallory", "via": "root"}], "the sender must be an object"),
    ("plan_feedback", ["[EDIT_PLAN]   "], "[EDIT_PLAN] needs a description"),
    ("clarification_answer", ["the EU"], "clarification_answer: the run is not waiting for clarification_answer"),
    ("clarification_answer", [7], "clarification_answer: the run is not waiting"),
]


def ignored(status: RunStatus) -> list[str]:
    return [event.message for event in status.events if event.kind == "ignored"]


async def no_task_failures(handle: WorkflowHandle) -> None:
    history = await handle.fetch_history()
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in [event.event_type for event in history.events]


async def test_each_bad_signal_is_recorded_and_the_run_goes_on(time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    for number, (name, args, reason) in enumerate(BAD_SIGNALS, start=1):
        await handle.signal(name, args=args)
        status = await wait_for(handle, lambda s, n=number: len(ignored(s)) == n)
        assert reason in ignored(status)[-1], (args, ignored(status))
        assert awaiting_review(status), "a bad signal must leave the run waiting"
    await handle.signal("plan_feedback", "[ACCEPTED]")
    assert (await handle.result()).outcome is Outcome.REPORT
    await no_task_failures(handle)


async def test_late_feedback_after_acceptance_is_recorded_as_ignored(time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    await handle.signal("plan_feedback", "[ACCEPTED]")
    await handle.signal("plan_feedback", "[ACCEPTED]")  # the first was taken; nothing awaits a second
    await handle.result()
    status = await handle.query("status", result_type=RunStatus)
    assert [message for message in ignored(status) if "not waiting for plan_feedback" in message]
    await no_task_failures(handle)


@pytest.mark.parametrize("flood", [3 * MAX_IGNORED_EVENTS])
async def test_a_flood_of_bad_signals_keeps_only_the_latest_few(time_worker: Client, flood: int) -> None:
    handle = await start(time_worker)
    before = await wait_for(handle, awaiting_review)
    for number in range(flood):
        await handle.signal("plan_feedback", f"bad {number}")
    status = await wait_for(handle, lambda s: any(f"bad {flood - 1}" in m for m in ignored(s)))
    assert len(ignored(status)) == MAX_IGNORED_EVENTS
    assert f"bad {flood - MAX_IGNORED_EVENTS}'" in ignored(status)[0]  # the oldest kept: the rest dropped
    # The run's own story survives the flood.
    assert [event for event in status.events if event.kind != "ignored"] == before.events
    await handle.signal("plan_feedback", "[ACCEPTED]")
    assert (await handle.result()).outcome is Outcome.REPORT


def test_the_recorded_history_ignored_the_bad_signals_then_ran_the_plan() -> None:
    # tests/test_replay.py replays it; this says what it holds.
    history = load(HISTORIES / "ignored_feedback.json")
    signals = [event for event in history.events if event.HasField("workflow_execution_signaled_event_attributes")]
    assert len(signals) == len(IGNORED_SIGNALS) + 1
    kinds = [event.event_type for event in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
