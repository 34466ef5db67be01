"""Runs with models that fall short (issue #11), on the time-skipping server with the real chat
activity: an unusable plan is re-asked once with the error quoted, a reply cut at the output cap
is handled on purpose, and an outcome without research says so in the status and the result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client, WorkflowFailureError

from cli.render import plan_text, status_text
from cli.runs import EXIT_CODES
from offline.model_server import FakeModelServer, Fault
from tests.support.runs import awaiting_review, start, wait_for
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.plan import Plan
from workflows.contracts.research import Outcome
from workflows.contracts.status import Phase, RunStatus
from workflows.research.coordination import DIRECT_REPLY_NOTE
from workflows.research.progress import current_details
from workflows.research.reporter import ZERO_FINDINGS_NOTE
from workflows.research.workflow import NO_RESEARCH_NOTE


def reask_of(model_server: FakeModelServer) -> str:
    """The re-ask message the second planner request ended with."""
    second = model_server.requests_for("planner")[1]
    return second["messages"][-1]["content"]


@pytest.mark.parametrize(("fault", "quoted"), [
    (Fault.plan_without_title(), "title: missing"),
    (Fault.empty_plan(), "the plan has no steps"),
    (Fault.non_json_plan(), "not a JSON plan object"),
], ids=["no-title", "no-steps", "prose"])
async def test_an_unusable_plan_is_re_asked_once_quoting_the_error(
    time_worker: Client, model_server: FakeModelServer, fault: Fault, quoted: str
) -> None:
    model_server.inject(fault)
    handle = await start(time_worker, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.plan is not None and result.plan.title and result.plan.steps[0].execution_res
    assert len(model_server.requests_for("planner")) == 2
    assert quoted in reask_of(model_server)
    status = await handle.query("status", result_type=RunStatus)
    assert any("asking again" in event.message for event in status.events if event.kind == "error")


async def test_two_unusable_plans_end_the_run_with_a_one_line_reason(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.plan_without_title(), Fault.plan_without_title())
    handle = await start(time_worker, auto_accept_plan=True)
    result = await handle.result()
    assert result.outcome is Outcome.FAILED
    assert result.error == "The planner did not produce a usable plan: the planner's plan does not match the " \
                           "schema: title: missing"
    assert "pydantic" not in result.report and "\n" not in result.report
    status = await handle.query("status", result_type=RunStatus)
    assert status.outcome is Outcome.FAILED and status.error == result.error


@pytest.fixture
async def small_caps(provider_env: dict[str, str], worker_with: WorkerWith) -> AsyncIterator[Client]:
    """A worker with output caps of 64 tokens and a short request timeout, so a reply that never
    ends would fail the test quickly."""
    async with worker_with(settings_with(provider_env, LLM_REQUEST_TIMEOUT="2",
                                         LLM_AGENT_MAX_OUTPUT_TOKENS="planner=64,reporter=64")) as client:
        yield client


async def test_a_planner_looping_to_its_cap_is_re_asked_not_retried(
    small_caps: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.loop(agent="planner"))
    handle = await start(small_caps, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT and result.plan is not None
    assert "cut at the output cap of 64 tokens" in reask_of(model_server)
    assert len(model_server.requests_for("planner")) == 2  # the loop once, then the re-ask


async def test_a_report_cut_at_its_cap_is_kept_and_marked(small_caps: Client, model_server: FakeModelServer) -> None:
    model_server.inject(Fault.loop(agent="reporter"))
    handle = await start(small_caps, auto_accept_plan=True, max_step_num=1)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert result.report.startswith("Solar power is a clean source of energy.")
    assert result.report.endswith("(LLM_AGENT_MAX_OUTPUT_TOKENS, reporter=…).")
    assert any("output cap of 64 tokens" in note for note in result.notes)
    assert len(model_server.requests_for("reporter")) == 1


async def test_a_direct_reply_is_labelled_as_one(time_worker: Client) -> None:
    handle = await start(time_worker, question="hello")
    result = await handle.result()
    assert result.outcome is Outcome.DIRECT_REPLY and result.notes == [DIRECT_REPLY_NOTE]
    status = await handle.query("status", result_type=RunStatus)
    assert status.outcome is Outcome.DIRECT_REPLY and status.notes == [DIRECT_REPLY_NOTE]
    assert "Outcome: direct reply (no research was done)" in current_details(status)


async def test_no_research_needed_is_said_in_the_status_and_at_the_top_of_the_report(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.no_research_plan())
    handle = await start(time_worker, auto_accept_plan=True)
    result = await handle.result()
    assert result.outcome is Outcome.REPORT and result.notes == [NO_RESEARCH_NOTE, ZERO_FINDINGS_NOTE]
    assert result.report.startswith(f"> **Note:** {NO_RESEARCH_NOTE}\n\n> **Note:** {ZERO_FINDINGS_NOTE}\n\n")
    assert not model_server.requests_for("researcher")
    status = await handle.query("status", result_type=RunStatus)
    assert f"Note: {NO_RESEARCH_NOTE}" in current_details(status)


async def test_a_researched_report_carries_no_note(time_worker: Client) -> None:
    result = await (await start(time_worker, auto_accept_plan=True, max_step_num=1)).result()
    assert result.outcome is Outcome.REPORT and result.notes == []
    assert not result.report.startswith("> **Note:**")


def test_the_cli_shows_the_outcome_and_its_exit_code_tells_research_from_a_reply() -> None:
    status = RunStatus(phase=Phase.COMPLETED, outcome=Outcome.DIRECT_REPLY, notes=[DIRECT_REPLY_NOTE])
    text = status_text("run-1", status)
    assert "Outcome: direct reply (no research was done)" in text and f"Note: {DIRECT_REPLY_NOTE}" in text
    assert (EXIT_CODES[Outcome.REPORT], EXIT_CODES[Outcome.FAILED], EXIT_CODES[Outcome.DIRECT_REPLY]) == (0, 1, 3)


def test_the_web_ui_details_say_no_research_needed_on_the_plan() -> None:
    plan = Plan(title="Tides", has_enough_context=True)
    assert "**Plan:** Tides (version 0) · no research needed" in current_details(
        RunStatus(phase=Phase.REPORTING, plan=plan))


async def test_a_first_plan_needing_no_research_goes_to_review_saying_so(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.no_research_plan())
    handle = await start(time_worker)
    status = await wait_for(handle, awaiting_review)
    assert status.plan is not None and status.plan.has_enough_context
    assert "no research needed" in current_details(status)
    assert "no research steps needed" in plan_text(status.plan)
    await handle.signal("plan_feedback", "[ACCEPTED]")
    result = await handle.result()
    assert result.notes == [NO_RESEARCH_NOTE, ZERO_FINDINGS_NOTE]
    assert not model_server.requests_for("researcher")


async def test_a_person_can_send_a_no_research_plan_back_for_research(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.no_research_plan())
    handle = await start(time_worker, max_step_num=1)
    await wait_for(handle, awaiting_review)
    await handle.signal("plan_feedback", "[EDIT_PLAN] please research it")
    await wait_for(handle, lambda status: awaiting_review(status) and len(status.plan_history) == 2)
    await handle.signal("plan_feedback", "[ACCEPTED]")
    result = await handle.result()
    assert result.notes == [] and result.plan is not None and result.plan.steps[0].execution_res


async def test_a_run_failed_by_its_provider_shows_the_failed_outcome(
    time_worker: Client, model_server: FakeModelServer
) -> None:
    model_server.inject(Fault.status(401, "bad key", agent="planner"))
    handle = await start(time_worker, auto_accept_plan=True)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    status = await handle.query("status", result_type=RunStatus)
    assert status.outcome is Outcome.FAILED and "bad key" in (status.error or "")
