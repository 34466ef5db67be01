"""Waiting on people, on the time-skipping server: multi-day reviews, deadlines, edit loops and
clarification rounds. Simulated days pass in milliseconds; the workflow code is the real one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from offline.model_server import FakeModelServer
from tests.support.runs import awaiting_review, cancelled_status, start, wait_for
from workflows.calls.errors import failure_message
from workflows.contracts.research import Outcome, ReviewOutcome
from workflows.contracts.status import Phase, RunStatus, StepState


async def test_a_plan_waits_three_days_for_review_and_then_runs(time_env: WorkflowEnvironment,
                                                                 time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    before = await time_env.get_current_time()
    await time_env.sleep(timedelta(days=3))
    assert await time_env.get_current_time() - before >= timedelta(days=3)

    waiting = await handle.query("status", result_type=RunStatus)
    assert awaiting_review(waiting)
    assert waiting.review_deadline is not None
    await handle.signal("plan_feedback", "[ACCEPTED]")
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None and all(step.execution_res for step in result.plan.steps)


async def test_review_timeout_accept_runs_the_plan(time_worker: Client) -> None:
    handle = await start(time_worker, review_timeout="P1D", review_timeout_action="accept")
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None and all(step.execution_res for step in result.plan.steps)
    status = await handle.query("status", result_type=RunStatus)
    assert any(event.kind == "review" and "accept" in event.message for event in status.events)


async def test_review_timeout_cancel_ends_the_run_cancelled_and_says_why(time_worker: Client) -> None:
    handle = await start(time_worker, review_timeout="PT2H", review_timeout_action="cancel")
    status = await cancelled_status(handle)
    assert status.outcome is Outcome.CANCELLED and status.awaiting is None and not status.decisions
    assert any("not reviewed within 2:00:00" in note for note in status.notes)
    assert status.plan is not None and not any(step.execution_res for step in status.plan.steps)


async def test_review_timeout_report_writes_the_report_from_what_is_known(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    handle = await start(time_worker, review_timeout="P2D", review_timeout_action="report")
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None and not any(step.execution_res for step in result.plan.steps)
    assert model_server.requests_for("reporter")
    final = await handle.query("status", result_type=RunStatus)
    assert all(step.state is StepState.PENDING for step in final.steps)


async def test_the_default_review_timeout_is_seven_days(time_env: WorkflowEnvironment, time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    await time_env.sleep(timedelta(days=6, hours=23))
    assert awaiting_review(await handle.query("status", result_type=RunStatus))
    status = await cancelled_status(handle)  # the deadline passes; the default action cancels
    assert status.outcome is Outcome.CANCELLED


async def test_edit_loop_with_two_revisions_keeps_the_plan_history(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    handle = await start(time_worker)
    edits = ["[EDIT_PLAN] add a step on manufacturing costs", "[EDIT_PLAN] cover recycling of old cells"]
    for version, edit in enumerate(edits, start=1):
        await wait_for(handle, lambda s, v=version: awaiting_review(s) and len(s.plan_history) == v)
        await handle.execute_update("review_plan", edit, result_type=ReviewOutcome)

    final_review = await wait_for(handle, lambda s: awaiting_review(s) and len(s.plan_history) == 3)
    # the planner saw every feedback so far, in order, when it wrote the last revision
    last_planner_messages = model_server.requests_for("planner")[-1]["messages"]
    feedback_seen = [m["content"] for m in last_planner_messages if m.get("name") == "feedback"]
    feedback_seen = [m["content"] for m in last_planner_messages if m.get("name") == "feedback"]
    assert feedback_seen == edits
    assert [version.feedback for version in final_review.plan_history] == [None, *edits]
    assert "recycling of old cells" in final_review.plan_history[2].plan.model_dump_json()
    await handle.signal("plan_feedback", "[ACCEPTED]")
    result = await handle.result()
    assert result.plan is not None and result.plan.title == final_review.plan_history[2].plan.title
    assert final_review.plan_iterations == 0  # edits do not count as iterations (DeerFlow)
    assert (await handle.query("status", result_type=RunStatus)).plan_iterations == 1


def awaiting_clarification(status: RunStatus) -> bool:
    return status.phase is Phase.AWAITING_CLARIFICATION and status.awaiting == "clarification_answer"


async def test_two_clarification_rounds_then_the_coordinator_hands_off(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    handle = await start(time_worker, question="Tell me about batteries", enable_clarification=True,
                         max_clarification_rounds=2, auto_accept_plan=True)
    first = await wait_for(handle, awaiting_clarification)
    assert first.question and "focus" in first.question
    outcome = await handle.execute_update("clarification_answer", "solid-state cells for cars",
                                          result_type=ReviewOutcome)
    assert outcome.accepted

    second = await wait_for(handle, lambda s: awaiting_clarification(s) and s.clarification_rounds == 1)
    assert second.question and second.question != first.question
    await handle.signal("clarification_answer", "Europe, the next five years")

    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    coordinator_calls = model_server.requests_for("coordinator")
    assert len(coordinator_calls) == 3
    last_tools = {tool["function"]["name"] for tool in coordinator_calls[-1]["tools"]}
    assert last_tools == {"handoff_to_planner"}, "at the round limit the coordinator may only hand off"
    planner_task = model_server.requests_for("planner")[0]["messages"][1]["content"]
    for said in ("Tell me about batteries", "solid-state cells for cars", "Europe, the next five years"):
        assert said in planner_task
    # The answers qualify the question in the plan's step titles, whole, and nothing else does.
    subject = "Batteries (solid-state cells for cars; Europe, the next five years)"
    assert result.plan is not None and all(step.title.endswith(f": {subject}") for step in result.plan.steps)
    assert (await handle.query("status", result_type=RunStatus)).clarification_rounds == 2


async def test_clarification_answer_is_rejected_when_no_question_is_pending(time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("clarification_answer", "anything", result_type=ReviewOutcome)
    assert "not waiting for clarification_answer" in failure_message(rejected.value.cause)
    await handle.signal("clarification_answer", "stray answer")  # dropped, not fatal
    await handle.signal("plan_feedback", "[ACCEPTED]")
    assert (await handle.result()).outcome is Outcome.REPORT


async def test_current_details_show_what_the_run_awaits(time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)
    metadata = await handle.query("__temporal_workflow_metadata")
    details = metadata.current_details if hasattr(metadata, "current_details") else metadata["currentDetails"]
    assert "Awaiting plan review" in details and "[ACCEPTED]" in details
    await handle.signal("plan_feedback", "[ACCEPTED]")
    await handle.result()
