"""Per-run token budgets on the time-skipping server (issue #26, item 1): a budget crossed
mid-research pauses the run, and raise, finish-now, cancel and the timeout each do what they say.

With the offline model a plan's three steps cost about 2,000, 3,000 and 5,600 tokens after some
3,500 for coordination and planning, so a budget of 7,000 is crossed before the second step.
"""

from __future__ import annotations

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from tests.support.budgets import decide as decide_as
from tests.support.budgets import paused_for_budget, steps_run
from tests.support.runs import start, wait_for
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.budget_models import BudgetAction, BudgetDecision
from workflows.decisions import Actor, Via
from workflows.errors import failure_message
from workflows.models import Outcome, Phase, RunStatus, StepState

ALICE = Actor(name="alice", via=Via.API)
CROSSED_MID_RESEARCH = 7_000


async def paused(client: Client, **fields: object) -> tuple[WorkflowHandle, RunStatus]:
    handle = await start(client, auto_accept_plan=True, token_budget=CROSSED_MID_RESEARCH, **fields)
    status = await wait_for(handle, paused_for_budget)
    done = [step.state is StepState.DONE for step in status.steps]
    assert any(done) and not all(done), "the pause comes between steps, mid-research"
    assert status.budget is not None and status.budget.expected_next_step and status.budget.expected_rest
    return handle, status


async def decide(handle: WorkflowHandle, decision: BudgetDecision) -> None:
    await decide_as(handle, decision, ALICE)


async def test_raising_the_budget_runs_the_rest_of_the_plan(time_worker: Client) -> None:
    handle, _ = await paused(time_worker)
    with pytest.raises(WorkflowUpdateFailedError):  # a raise must raise
        await decide(handle, BudgetDecision(action=BudgetAction.RAISE, tokens=CROSSED_MID_RESEARCH))
    await decide(handle, BudgetDecision(action=BudgetAction.RAISE, tokens=1_000_000))
    result = await handle.result()
    assert result.outcome is Outcome.REPORT and steps_run(result) == 3
    assert result.budget is not None and result.budget.tokens == 1_000_000 and not result.budget.cut_short
    assert [(d.kind, d.decision, d.by) for d in result.decisions] == [
        ("budget", "raise to 1,000,000 tokens", ALICE)]


async def test_finishing_now_writes_the_report_from_what_was_found(time_worker: Client) -> None:
    handle, status = await paused(time_worker)
    done = sum(step.state is StepState.DONE for step in status.steps)
    await decide(handle, BudgetDecision(action=BudgetAction.FINISH))
    result = await handle.result()
    assert result.outcome is Outcome.REPORT and steps_run(result) == done
    assert result.budget is not None and result.budget.cut_short
    assert any("cut short by the token budget" in note for note in result.notes)


async def test_cancelling_at_the_budget_ends_the_run_without_a_report(time_worker: Client) -> None:
    handle, _ = await paused(time_worker)
    await handle.signal("budget", args=[{"action": "cancel"}, ALICE])  # the signal works as the update
    result = await handle.result()
    assert result.outcome is Outcome.CANCELLED and "cancelled at its token budget" in result.report
    assert [(d.kind, d.by) for d in result.decisions] == [("budget", ALICE)]


@pytest.mark.parametrize(("action", "outcome"), [("finish", Outcome.REPORT), ("cancel", Outcome.CANCELLED)])
async def test_nobody_deciding_in_time_applies_the_timeout_action(time_worker: Client, action: str,
                                                                  outcome: Outcome) -> None:
    handle = await start(time_worker, auto_accept_plan=True, token_budget=CROSSED_MID_RESEARCH,
                         review_timeout="PT2H", budget_timeout_action=action)
    result = await handle.result()  # the time-skipping server runs the two hours out
    assert result.outcome is outcome and not result.decisions
    status = await handle.query("status", result_type=RunStatus)
    assert any(event.kind == "budget" and f"No budget decision within 2:00:00: {action}" in event.message
               for event in status.events)


async def test_a_run_within_its_budget_never_pauses(time_worker: Client) -> None:
    handle = await start(time_worker, auto_accept_plan=True, token_budget=1_000_000)
    result = await handle.result()
    assert steps_run(result) == 3 and result.budget is not None and result.budget.tokens == 1_000_000
    status = await handle.query("status", result_type=RunStatus)
    assert not any(event.message.startswith(Phase.AWAITING_BUDGET.value) for event in status.events)


async def test_the_operator_default_applies_and_its_maximum_bounds_requests_and_raises(
        worker_with: WorkerWith, provider_env: dict[str, str]) -> None:
    settings = settings_with(provider_env, DEERFLOW_RUN_TOKEN_BUDGET=str(CROSSED_MID_RESEARCH),
                             DEERFLOW_RUN_TOKEN_BUDGET_MAX="9000")
    async with worker_with(settings) as client:
        handle = await start(client, auto_accept_plan=True)  # no budget asked: the operator's default
        await wait_for(handle, paused_for_budget)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await decide(handle, BudgetDecision(action=BudgetAction.RAISE, tokens=9_001))
        assert "maximum is 9,000" in failure_message(refused.value.cause)
        await decide(handle, BudgetDecision(action=BudgetAction.FINISH))
        assert (await handle.result()).budget.tokens == CROSSED_MID_RESEARCH  # type: ignore[union-attr]

        greedy = await start(client, auto_accept_plan=True, token_budget=1_000_000)
        await wait_for(greedy, paused_for_budget)
        status = await greedy.query("status", result_type=RunStatus)
        assert status.budget is not None and status.budget.tokens == 9_000
        assert any("above the operator's maximum" in note for note in status.notes)
        await decide(greedy, BudgetDecision(action=BudgetAction.CANCEL))
        await greedy.result()
