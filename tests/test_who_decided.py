"""Who decided, on the time-skipping server: each review, answer and cancel is recorded with the
person and the door it came through, in the status, the plan history and the result."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError

from cli.actor import cli_actor
from runtime import research_client
from runtime.front_door import CliError
from tests.support.runs import awaiting_review, start, wait_for
from workflows.contracts.decisions import OUTSIDE, Actor, Via
from workflows.contracts.status import Phase, RunStatus

ALICE = Actor(name="alice", via=Via.CLI)
BOB = Actor(name="bob", via=Via.API)


async def test_an_edit_and_an_acceptance_each_name_their_reviewer(time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    await research_client.review_plan(handle, "[EDIT_PLAN] add a step on costs", ALICE)
    await wait_for(handle, lambda s: awaiting_review(s) and len(s.plan_history) == 2)
    await research_client.review_plan(handle, "[ACCEPTED]", BOB)
    result = await handle.result()

    assert [(d.kind, d.decision, d.by) for d in result.decisions] == [
        ("plan_review", "[EDIT_PLAN] add a step on costs", ALICE), ("plan_review", "[ACCEPTED]", BOB)]
    status = await handle.query("status", result_type=RunStatus)
    assert [version.review.by if version.review else None for version in status.plan_history] == [ALICE, BOB]
    assert status.decisions == result.decisions
    assert any(event.kind == "review" and "by alice (cli)" in event.message for event in status.events)


async def test_a_signal_with_a_sender_names_it_and_one_without_comes_from_outside(time_worker: Client) -> None:
    named = await start(time_worker)
    anonymous = await start(time_worker)
    await wait_for(named, awaiting_review)
    await wait_for(anonymous, awaiting_review)
    await named.signal("plan_feedback", args=["[ACCEPTED]", BOB])
    await anonymous.signal("plan_feedback", "[ACCEPTED]")  # as the temporal CLI and the Web UI send it
    assert [d.by for d in (await named.result()).decisions] == [BOB]
    assert [d.by for d in (await anonymous.result()).decisions] == [OUTSIDE]


async def test_a_clarification_answer_names_who_gave_it(time_worker: Client) -> None:
    handle = await start(time_worker, question="Tell me about batteries", enable_clarification=True,
                         max_clarification_rounds=1, auto_accept_plan=True)
    await wait_for(handle, lambda s: s.phase is Phase.AWAITING_CLARIFICATION)
    await research_client.answer_clarification(handle, "solid-state cells for cars", ALICE)
    [decision] = (await handle.result()).decisions
    assert (decision.kind, decision.by) == ("clarification", ALICE)
    assert "solid-state cells for cars" in decision.decision


async def test_a_bad_sender_is_refused_before_it_reaches_history(time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update("review_plan", args=["[ACCEPTED]", {"name": "", "via": "cli"}])
    status = await handle.query("status", result_type=RunStatus)
    assert awaiting_review(status) and not status.decisions
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):  # wait for its end: a run terminated mid-activity stops
        await asyncio.wait_for(handle.result(), 30)  # the time-skipping clock (tests/conftest.py)


@pytest.mark.parametrize(("cancel", "by"), [
    (lambda handle: research_client.cancel(handle, ALICE), ALICE),
    (lambda handle: handle.cancel(), OUTSIDE),  # the temporal CLI's cancel carries no reason
    (lambda handle: handle.cancel(reason="deerflow-actor:{not json"), OUTSIDE),
])
async def test_a_cancel_records_who_cancelled(time_worker: Client, cancel: Callable[[WorkflowHandle], Awaitable[None]],
                                              by: Actor) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    await cancel(handle)
    with pytest.raises(WorkflowFailureError) as failure:
        await asyncio.wait_for(handle.result(), 30)
    assert "cancel" in str(failure.value.cause).lower()
    status = await handle.query("status", result_type=RunStatus)
    assert [(d.kind, d.by) for d in status.decisions] == [("cancel", by)]


def test_the_cli_names_the_os_user_unless_told_another_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "dora")
    assert cli_actor(argparse.Namespace(as_name=None)) == Actor(name="dora", via=Via.CLI)
    assert cli_actor(argparse.Namespace(as_name="erin")) == Actor(name="erin", via=Via.CLI)
    with pytest.raises(CliError):
        cli_actor(argparse.Namespace(as_name="x" * 65))
