"""Forks of a research run on the time-skipping server, with the real activities and fake providers:
from the plan, from a step and from the report, each paying only for what comes after its point
(the fakes' request logs say what was paid for), with the source's results before it reused as
the source had them, and the link kept in the fork's status."""

from __future__ import annotations

import re

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from offline.model_server import FakeModelServer
from offline.search_server import FakeSearchServer
from tests.support.runs import QUESTION, awaiting_review, run_id, start, wait_for
from workflows.contracts.enhance import ENHANCER_WORKFLOW, EnhanceRequest
from workflows.contracts.fork_point import ForkPoint, ForkStage
from workflows.contracts.report_style import ReportStyle
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchRequest, ResearchResult
from workflows.contracts.status import RunStatus, StepState

CURRENT_STEP = re.compile(r"# Current Step\n\n## Title\n\n(.+)")
AGENTS = ("coordinator", "planner", "researcher", "coder", "reporter")


def calls(model: FakeModelServer) -> dict[str, int]:
    """How many model calls each agent made since the log was last cleared."""
    counted = {agent: len(model.requests_for(agent)) for agent in AGENTS}
    assert sum(counted.values()) == len(model.requests), "a model call of no known agent"
    return counted


def steps_worked_on(model: FakeModelServer) -> set[str]:
    """The titles of the steps the researcher and the coder were asked to do
    (workflows/research/messages.py: step_task)."""
    bodies = model.requests_for("researcher") + model.requests_for("coder")
    return {found.group(1) for body in bodies for message in body["messages"]
            if (found := CURRENT_STEP.search(str(message.get("content") or "")))}


async def activities_scheduled(handle: WorkflowHandle) -> list[str]:
    history = await handle.fetch_history()
    return [event.activity_task_scheduled_event_attributes.activity_type.name for event in history.events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]


async def finished_source(client: Client, model: FakeModelServer, search: FakeSearchServer,
                          **fields: object) -> tuple[WorkflowHandle, ResearchResult]:
    """A research run that ran to its report; the fakes' logs are cleared after it."""
    handle = await start(client, auto_accept_plan=True, **fields)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT and result.plan is not None
    model.requests.clear()
    search.requests.clear()
    return handle, result


async def fork(client: Client, source: WorkflowHandle, stage: ForkStage, step: int | None = None,
               edit: str | None = None, **fields: object) -> WorkflowHandle:
    """A fork of ``source``, its request the source's (auto-accepted) with ``fields`` changed."""
    point = ForkPoint(workflow_id=source.id, stage=stage, step=step, edit=edit)
    return await start(client, auto_accept_plan=True, forked_from=point.model_dump(), **fields)


async def test_a_fork_from_the_report_pays_for_the_reporter_alone_and_writes_in_its_own_style(
    time_worker: Client, model_server: FakeModelServer, search_server: FakeSearchServer,
) -> None:
    source, original = await finished_source(time_worker, model_server, search_server)
    assert "## What We Know" not in original.report  # academic, the default

    forked = await fork(time_worker, source, ForkStage.REPORT, report_style=ReportStyle.NEWS.value)
    result = await forked.result()

    assert calls(model_server) == {"coordinator": 0, "planner": 0, "researcher": 0, "coder": 0, "reporter": 1}
    assert search_server.requests == []
    assert result.outcome is Outcome.REPORT
    assert "## What We Know" in result.report and "## What Remains Unclear" in result.report  # the news style
    assert result.plan == original.plan  # every finding reused as the source found it
    assert result.usage.llm_calls == 1  # the fork counts its own spending only
    assert f"Forked from run {source.id} at the report" in result.report
    status = await forked.query("status", result_type=RunStatus)
    assert status.forked_from is not None and status.forked_from.workflow_id == source.id
    assert status.forked_from.stage is ForkStage.REPORT
    assert [step.state for step in status.steps] == [StepState.DONE] * len(original.plan.steps)


async def test_a_fork_from_step_2_pays_for_steps_2_onwards_with_the_edited_step(
    time_worker: Client, model_server: FakeModelServer, search_server: FakeSearchServer,
) -> None:
    source, original = await finished_source(time_worker, model_server, search_server)
    assert original.plan is not None and len(original.plan.steps) == 3
    first = original.plan.steps[0]
    edit = "Compare the cycle life of sulfide and oxide electrolytes in 2025 prototypes"

    forked = await fork(time_worker, source, ForkStage.STEP, step=2, edit=edit,
                        report_style=ReportStyle.NEWS.value)
    result = await forked.result()

    spent = calls(model_server)
    assert spent["coordinator"] == spent["planner"] == 0 and spent["reporter"] == 1
    assert steps_worked_on(model_server) == {step.title for step in original.plan.steps[1:]}  # not step 1
    asked = model_server.requests_for("researcher") + model_server.requests_for("coder")
    assert any(f"## Description\n\n{edit}" in str(message.get("content")) for body in asked
               for message in body["messages"])
    assert result.plan is not None
    assert result.plan.steps[0].execution_res == first.execution_res  # reused, word for word
    assert result.plan.steps[1].description == edit
    assert all(step.execution_res for step in result.plan.steps)
    assert "## What We Know" in result.report
    assert f"Forked from run {source.id} at step 2" in result.report
    assert result.usage.llm_calls == sum(spent.values())


async def test_a_fork_from_the_plan_plans_again_from_the_background_investigation_with_the_edit(
    time_worker: Client, model_server: FakeModelServer, search_server: FakeSearchServer,
) -> None:
    source = await start(time_worker)  # reviewed: an edit first, then accepted
    await wait_for(source, awaiting_review)
    await source.signal("plan_feedback", "[EDIT_PLAN] add a step on recycling")
    await wait_for(source, lambda s: awaiting_review(s) and len(s.plan_history) == 2)
    await source.signal("plan_feedback", "[ACCEPTED]")
    await source.result()
    background = model_server.requests_for("planner")[0]["messages"]
    model_server.requests.clear()
    search_server.requests.clear()

    forked = await fork(time_worker, source, ForkStage.PLAN, edit="add a step on manufacturing costs")
    result = await forked.result()

    spent = calls(model_server)
    assert spent["coordinator"] == 0 and spent["planner"] == 1 and spent["reporter"] == 1
    planner_messages = model_server.requests_for("planner")[0]["messages"]
    assert [m for m in planner_messages if m.get("name") == "background_investigation"] == \
        [m for m in background if m.get("name") == "background_investigation"]  # reused, not searched again
    assert not any("recycling" in message.get("content", "") and message.get("name") == "feedback"
                   for message in planner_messages), "the source's own edit rounds are not the fork's"
    assert planner_messages[-1]["name"] == "feedback"
    assert planner_messages[-1]["content"] == "[EDIT_PLAN] add a step on manufacturing costs"
    scheduled = await activities_scheduled(forked)
    assert scheduled[:3] in (["load_run_config", "read_fork_source", "chat"],
                             ["read_fork_source", "load_run_config", "chat"])  # no background search first
    assert result.plan is not None and "manufacturing costs" in result.plan.model_dump_json()
    status = await forked.query("status", result_type=RunStatus)
    assert status.plan_history[0].feedback == "[EDIT_PLAN] add a step on manufacturing costs"


async def test_a_fork_of_a_fork_reuses_what_the_fork_found(
    time_worker: Client, model_server: FakeModelServer, search_server: FakeSearchServer,
) -> None:
    source, _ = await finished_source(time_worker, model_server, search_server)
    first_fork = await fork(time_worker, source, ForkStage.STEP, step=3)
    middle = await first_fork.result()
    model_server.requests.clear()

    second = await fork(time_worker, first_fork, ForkStage.REPORT, report_style=ReportStyle.POPULAR_SCIENCE.value)
    result = await second.result()

    assert calls(model_server)["reporter"] == 1 and len(model_server.requests) == 1
    assert result.plan == middle.plan


@pytest.mark.parametrize(("stage", "step", "refusal"), [
    (ForkStage.STEP, 4, "plan has 3 step(s), not 4"),
    (ForkStage.STEP, 1, "never started its plan's steps"),
    (ForkStage.REPORT, None, None),  # a report from no findings is allowed: the reporter says so
])
async def test_a_point_the_source_never_reached_fails_the_fork_saying_why(
    time_worker: Client, model_server: FakeModelServer, stage: ForkStage, step: int | None, refusal: str | None,
) -> None:
    source = await start(time_worker)  # paused for review, then cancelled: its plan never ran
    await wait_for(source, awaiting_review)
    await source.cancel()
    model_server.requests.clear()

    forked = await fork(time_worker, source, stage, step=step)
    if refusal is None:
        result = await forked.result()
        assert "zero research findings" in result.report
        return
    with pytest.raises(WorkflowFailureError) as failed:
        await forked.result()
    assert isinstance(failed.value.cause, ApplicationError) and failed.value.cause.type == "InvalidFork"
    assert refusal in failed.value.cause.message
    assert model_server.requests == []
    status = await forked.query("status", result_type=RunStatus)
    assert status.error is not None and refusal in status.error


async def source_that_is(client: Client, kind: str) -> str:
    """The workflow id a fork names as its source: none, a content flow's, or the fork's own."""
    if kind == "missing":
        return "no-such-run"
    if kind == "itself":
        return run_id("fork-itself")
    flow = await client.start_workflow(ENHANCER_WORKFLOW, EnhanceRequest(prompt="tidal power"), id=run_id("flow"),
                                       task_queue=TASK_QUEUE)
    await flow.result()
    return flow.id


@pytest.mark.parametrize(("kind", "refusal"), [
    ("missing", "no research run no-such-run"),
    ("flow", "is a PromptEnhancerWorkflow"),  # a workflow that is no research run has no state to reuse
    ("itself", "a run cannot be forked from itself"),
])
async def test_a_fork_of_no_research_run_fails_at_once_without_a_call(
        time_worker: Client, model_server: FakeModelServer, kind: str, refusal: str) -> None:
    source_id = await source_that_is(time_worker, kind)
    model_server.requests.clear()
    request = ResearchRequest(question=QUESTION, forked_from=ForkPoint(workflow_id=source_id, stage=ForkStage.PLAN))
    forked = await time_worker.start_workflow(WORKFLOW_TYPE, request, task_queue=TASK_QUEUE,
                                              id=source_id if kind == "itself" else run_id("fork"))
    with pytest.raises(WorkflowFailureError) as failed:
        await forked.result()
    assert isinstance(failed.value.cause, ApplicationError)
    assert refusal in failed.value.cause.message
    assert model_server.requests == []
    history = await forked.fetch_history()
    attempts = [event for event in history.events if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and event.activity_task_started_event_attributes.attempt > 1]
    assert attempts == [], "a refused source is final, not retried"
