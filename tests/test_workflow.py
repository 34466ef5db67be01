"""DeepResearchWorkflow on the time-skipping server, with the real activities and fake providers.

These tests drive the public contract (start, status query, plan_feedback signal, review_plan
update, result) and check DeerFlow's routing: direct replies, edits, repaired and unusable plans,
failing providers and failing tools.
"""

from __future__ import annotations

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from offline.model_server import FakeModelServer, Fault
from offline.search_server import FakeSearchServer
from offline.search_server import Fault as SearchFault
from tests.support.runs import awaiting_review, start, wait_for
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.calls.errors import failure_message
from workflows.contracts.plan import StepType
from workflows.contracts.research import Outcome, ReviewOutcome
from workflows.contracts.status import Phase, RunStatus, StepState


async def test_accepted_plan_runs_every_step_and_the_report_uses_every_finding(time_worker: Client) -> None:
    handle = await start(time_worker)
    paused = await wait_for(handle, awaiting_review)
    assert paused.plan is not None and len(paused.plan.steps) == 3
    assert [step.state for step in paused.steps] == [StepState.PENDING] * 3

    await handle.signal("plan_feedback", "[ACCEPTED]")
    result = await handle.result()

    assert result.outcome is Outcome.REPORT
    assert result.plan is not None
    assert {step.step_type for step in result.plan.steps} == {StepType.RESEARCH, StepType.PROCESSING}
    for step in result.plan.steps:
        assert step.execution_res, f"step {step.title!r} has no finding"
        # Every step's finding reaches the report: its first substantial line appears there.
        marker = next(line for line in step.execution_res.splitlines() if len(line.strip()) > 30).strip()
        assert marker[:60] in result.report, f"finding of {step.title!r} missing from the report"
    assert "## Key Citations" in result.report
    assert result.locale == "en-US"
    assert result.usage.llm_calls >= 7  # coordinator, planner, 2 turns x 3 steps, reporter
    assert result.usage.total_tokens > 0

    final = await handle.query("status", result_type=RunStatus)
    assert final.phase is Phase.COMPLETED
    assert [step.state for step in final.steps] == [StepState.DONE] * 3


async def test_edit_plan_goes_back_to_the_planner_with_the_feedback(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    handle = await start(time_worker)
    first = await wait_for(handle, awaiting_review)
    outcome = await handle.execute_update("review_plan", "[EDIT_PLAN] add a step on manufacturing costs",
                                          result_type=ReviewOutcome)
    assert not outcome.accepted
    assert first.plan is not None
    revised = await wait_for(handle, lambda s: awaiting_review(s) and s.plan is not None
                             and s.plan != first.plan)
    assert revised.plan is not None
    assert "manufacturing costs" in revised.plan.model_dump_json()
    last_planner_call = model_server.requests_for("planner")[-1]
    assert any(message.get("name") == "feedback" and "[EDIT_PLAN] add a step on manufacturing costs"
               in message.get("content", "") for message in last_planner_call["messages"])

    await handle.signal("plan_feedback", "[ACCEPTED]")
    result = await handle.result()
    assert result.plan is not None
    assert result.plan.title == revised.plan.title
    assert all(step.execution_res for step in result.plan.steps)


async def test_small_talk_gets_a_direct_reply_without_a_plan(time_worker: Client) -> None:
    handle = await start(time_worker, question="hello")
    result = await handle.result()
    assert result.outcome is Outcome.DIRECT_REPLY
    assert result.plan is None
    assert "DeerFlow" in result.report
    assert result.usage.llm_calls == 1


async def test_chinese_question_is_researched_and_reported_in_chinese(time_worker: Client) -> None:
    handle = await start(time_worker, question="熬夜对健康有哪些影响", auto_accept_plan=True)
    result = await handle.result()
    assert result.locale == "zh-CN"
    assert "要点" in result.report


async def test_malformed_feedback_is_rejected_and_the_run_keeps_waiting(time_worker: Client) -> None:
    handle = await start(time_worker)
    await wait_for(handle, awaiting_review)

    await handle.signal("plan_feedback", "looks fine to me")  # not the protocol: logged and dropped
    await handle.signal("plan_feedback", "[EDIT_PLAN]")  # an edit with nothing to change
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("review_plan", "ship it", result_type=ReviewOutcome)
    assert "[ACCEPTED]" in failure_message(rejected.value.cause)

    still = await handle.query("status", result_type=RunStatus)
    assert awaiting_review(still)
    history = await handle.fetch_history()
    assert not any(event.HasField("workflow_execution_update_accepted_event_attributes")
                   for event in history.events), "a rejected update must not reach history"

    await handle.signal("plan_feedback", "[ACCEPTED]")
    assert (await handle.result()).outcome is Outcome.REPORT


async def test_feedback_when_no_review_is_pending_is_rejected(time_worker: Client) -> None:
    handle = await start(time_worker, question="hello")
    await handle.result()
    with pytest.raises(RPCError) as rejected:
        await handle.execute_update("review_plan", "[ACCEPTED]", result_type=ReviewOutcome)
    assert rejected.value.status is RPCStatusCode.NOT_FOUND  # the run has completed


async def test_auto_accept_skips_the_review(time_worker: Client) -> None:
    handle = await start(time_worker, auto_accept_plan=True, max_step_num=2)
    result = await handle.result()
    assert result.plan is not None and len(result.plan.steps) == 2
    assert all(step.execution_res for step in result.plan.steps)


async def test_fenced_malformed_plan_json_is_repaired(time_worker: Client, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.malformed_plan())
    handle = await start(time_worker, auto_accept_plan=True)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None and len(result.plan.steps) == 3


async def test_unrepairable_plan_on_the_first_iteration_ends_with_a_clear_error(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.non_json_plan(), Fault.non_json_plan())  # the plan and its one re-ask
    handle = await start(time_worker, auto_accept_plan=True)
    result = await handle.result()
    assert result.outcome is Outcome.FAILED
    assert result.error and "planner" in result.error
    assert result.plan is None


async def test_model_500s_are_retried_and_the_run_completes(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.status(500), Fault.status(503), Fault.status(429, retry_after=3))
    handle = await start(time_worker, auto_accept_plan=True, question="hello")
    result = await handle.result()
    assert result.outcome is Outcome.DIRECT_REPLY
    history = await handle.fetch_history()
    attempts = [event.activity_task_started_event_attributes.attempt for event in history.events
                if event.HasField("activity_task_started_event_attributes")]
    assert 4 in attempts  # the coordinator's call succeeded on its fourth attempt


async def test_model_401_fails_fast_with_the_providers_message(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.status(401, "Incorrect API key provided: sk-bad"))
    handle = await start(time_worker)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    message = failure_message(failed.value.cause)
    assert "Incorrect API key provided" in message and "401" in message
    chats = [body for body in model_server.requests]
    assert len(chats) == 1, "a 401 must not be retried"
    status = await handle.query("status", result_type=RunStatus)
    assert status.phase is Phase.FAILED


async def test_search_down_is_reported_by_the_step_and_the_run_still_reports(
    time_worker: Client, search_server: FakeSearchServer
) -> None:
    search_server.inject(*[SearchFault.http(500) for _ in range(40)])
    handle = await start(time_worker, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None
    finding = result.plan.steps[0].execution_res or ""
    assert "fail" in finding.lower()
    assert "fail" in result.report.lower()


async def test_recursion_limit_ends_the_step_with_a_summarising_turn(
    worker_with: WorkerWith, model_server: FakeModelServer, provider_env: dict[str, str],
) -> None:
    async with worker_with(settings_with(provider_env, AGENT_RECURSION_LIMIT="1")) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=1)
        result = await handle.result()
    assert result.outcome is Outcome.REPORT
    researcher_calls = model_server.requests_for("researcher")
    assert len(researcher_calls) == 2
    assert "tools" not in researcher_calls[-1] or not researcher_calls[-1]["tools"]
    assert "limit of tool calls" in researcher_calls[-1]["messages"][-1]["content"]


async def test_parallel_steps_run_independent_research_concurrently_and_keep_plan_order(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.latency_seconds = 0.2  # long enough that sequential steps could not overlap by chance
    handle = await start(time_worker, auto_accept_plan=True, parallel_steps=True, max_step_num=5)
    result = await handle.result()
    status = await handle.query("status", result_type=RunStatus)
    step_events = [(event.kind, event.step_index) for event in status.events if event.kind.startswith("step_")]
    started_before_first_done = [index for kind, index in step_events[: step_events.index(
        next(event for event in step_events if event[0] == "step_done"))] if kind == "step_started"]
    assert sorted(started_before_first_done) == [0, 1, 2, 3], step_events
    # the processing step waits for all four research steps
    assert step_events.index(("step_started", 4)) > max(step_events.index(("step_done", i)) for i in range(4))

    assert result.plan is not None
    positions = []
    for step in result.plan.steps:
        marker = next(line for line in (step.execution_res or "").splitlines() if len(line.strip()) > 30).strip()
        positions.append(result.report.index(f"### {len(positions) + 1}."))
        assert marker[:60] in result.report
    assert positions == sorted(positions), "findings must stay in plan order in the report"


async def test_sequential_steps_are_the_default(time_worker: Client) -> None:
    handle = await start(time_worker, auto_accept_plan=True)
    await handle.result()
    status = await handle.query("status", result_type=RunStatus)
    kinds = [(event.kind, event.step_index) for event in status.events if event.kind.startswith("step_")]
    assert kinds == [("step_started", 0), ("step_done", 0), ("step_started", 1), ("step_done", 1),
                     ("step_started", 2), ("step_done", 2)]


async def test_a_long_history_continues_as_new_and_the_run_still_completes(
    worker_with: WorkerWith, provider_env: dict[str, str]
) -> None:
    async with worker_with(settings_with(provider_env, DEERFLOW_CONTINUE_AS_NEW_EVENTS="40")) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=4)
        result = await handle.result()  # follows the chain of continued runs
        final = await client.get_workflow_handle(handle.id).query("status", result_type=RunStatus)
    first_run = await client.get_workflow_handle(handle.id, run_id=handle.result_run_id).fetch_history()
    assert first_run.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    assert result.outcome is Outcome.REPORT and result.plan is not None
    assert all(step.execution_res for step in result.plan.steps)
    for step in result.plan.steps:
        marker = next(line for line in (step.execution_res or "").splitlines() if len(line.strip()) > 30).strip()
        assert marker[:60] in result.report
    assert result.usage.llm_calls >= 11  # usage carried across the continuations
    assert any("continued as a new run" in event.message for event in final.events)
    assert len(final.plan_history) == 1
