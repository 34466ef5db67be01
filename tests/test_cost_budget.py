"""Per-run cost budgets on the time-skipping server (issue #26, item 1): the cost of a run's calls at
the operator's prices pauses it like its token budget, a raise may raise either, an unpriced model
counts tokens only and says so, and the report's last line says what was spent and whether the
research was cut short.

At one USD per million tokens each way, the offline model's run costs one micro-USD per token, so
the token budget's figures (tests/test_budget.py) hold: a budget of $0.014 is crossed before the
second step.
"""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from tests.support.budgets import decide as decide_as
from tests.support.budgets import paused_for_budget, steps_run
from tests.support.runs import cancelled_status, start, wait_for
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.calls.errors import failure_message
from workflows.contracts.budget import BudgetAction, BudgetDecision
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.research import Outcome
from workflows.contracts.status import RunStatus, StepState
from workflows.research.status_view import budget_line

ALICE = Actor(name="alice", via=Via.CLI)
OFFLINE_MODEL = "deerflow-offline-demo"
PRICED = json.dumps({OFFLINE_MODEL: {"input": 1, "output": 1}})
CROSSED_MID_RESEARCH = 0.014


async def paused(client: Client, **fields: object) -> tuple[WorkflowHandle, RunStatus]:
    handle = await start(client, auto_accept_plan=True, **{"cost_budget_usd": CROSSED_MID_RESEARCH, **fields})
    status = await wait_for(handle, paused_for_budget)
    done = [step.state is StepState.DONE for step in status.steps]
    assert any(done) and not all(done), "the pause comes between steps, mid-research"
    return handle, status


async def decide(handle: WorkflowHandle, decision: BudgetDecision) -> None:
    await decide_as(handle, decision, ALICE)


async def test_a_cost_budget_pauses_the_run_and_a_raise_of_the_cost_runs_the_rest(
        worker_with: WorkerWith, provider_env: dict[str, str]) -> None:
    async with worker_with(settings_with(provider_env, DEERFLOW_MODEL_PRICES=PRICED)) as client:
        handle, status = await paused(client)
        budget, standing = status.budget, status.budget_standing
        assert budget is not None and budget.tokens is None and budget.cost_usd == CROSSED_MID_RESEARCH
        assert standing is not None and standing.spent_usd == status.usage.total_tokens / 1_000_000 > 0
        assert standing.remaining_usd == pytest.approx(max(CROSSED_MID_RESEARCH - standing.spent_usd, 0))
        assert budget.expected_next_step_usd and budget.expected_rest_usd, "what the rest is expected to cost"
        price = status.usage.by_model[OFFLINE_MODEL].price
        assert price is not None and price.source == "DEERFLOW_MODEL_PRICES"
        with pytest.raises(WorkflowUpdateFailedError):  # a raise must raise
            await decide(handle, BudgetDecision(action=BudgetAction.RAISE, cost_usd=CROSSED_MID_RESEARCH))
        await decide(handle, BudgetDecision(action=BudgetAction.RAISE, cost_usd=1.0))
        result = await handle.result()
    assert result.outcome is Outcome.REPORT and steps_run(result) == 3
    assert result.budget is not None and result.budget.cost_usd == 1.0 and not result.budget.cut_short
    assert result.budget_standing is not None and result.budget_standing.spent_usd == result.usage.cost_usd > 0
    assert [(d.kind, d.decision, d.by) for d in result.decisions] == [("budget", "raise to $1.00", ALICE)]
    footer = result.report.rstrip().splitlines()[-1]
    assert footer.startswith("*Budget: ") and "of $1.00 spent" in footer and "not cut short" in footer


async def test_finishing_at_the_cost_budget_says_so_at_the_top_and_in_the_footer(
        worker_with: WorkerWith, provider_env: dict[str, str]) -> None:
    async with worker_with(settings_with(provider_env, DEERFLOW_MODEL_PRICES=PRICED)) as client:
        handle, _ = await paused(client)
        await decide(handle, BudgetDecision(action=BudgetAction.FINISH))
        result = await handle.result()
    assert result.outcome is Outcome.REPORT and result.budget is not None and result.budget.cut_short
    assert any("cut short by the cost budget ($0.0140)" in note for note in result.notes)
    assert "cut short by the cost budget" in result.report.split("\n\n")[0], "the note at the top"
    footer = result.report.rstrip().splitlines()[-1]
    assert "(cut short)" in footer and "the report is written from what was found" in footer
    assert f"of {'$0.0140'} spent" in footer, footer


async def test_a_token_raise_does_not_lift_a_crossed_cost_budget(
        worker_with: WorkerWith, provider_env: dict[str, str]) -> None:
    async with worker_with(settings_with(provider_env, DEERFLOW_MODEL_PRICES=PRICED)) as client:
        handle, _ = await paused(client, token_budget=1_000_000)
        await decide(handle, BudgetDecision(action=BudgetAction.RAISE, tokens=2_000_000))
        status = await wait_for(handle, lambda s: paused_for_budget(s) and len(s.decisions) == 1)
        assert status.budget is not None and status.budget.tokens == 2_000_000, "still paused: the cost"
        await decide(handle, BudgetDecision(action=BudgetAction.RAISE, tokens=3_000_000, cost_usd=1.0))
        result = await handle.result()
    assert steps_run(result) == 3
    assert [d.decision for d in result.decisions] == ["raise to 2,000,000 tokens",
                                                      "raise to 3,000,000 tokens and $1.00"]


async def test_an_unpriced_model_counts_tokens_only_and_the_status_says_so(time_worker: Client) -> None:
    handle = await start(time_worker, auto_accept_plan=True, cost_budget_usd=0.000001, token_budget=1_000_000)
    result = await handle.result()  # the offline model has no price: its calls cost nothing
    assert steps_run(result) == 3 and result.usage.cost_usd == 0 and result.usage.total_tokens > 0
    assert result.budget_standing is not None and result.budget_standing.unpriced_models == [OFFLINE_MODEL]
    status = await handle.query("status", result_type=RunStatus)
    line = budget_line(status)
    assert f"no price for {OFFLINE_MODEL}: its tokens count, its cost does not" in line, line


async def test_the_operator_cost_default_applies_and_its_maximum_bounds_requests_and_raises(
        worker_with: WorkerWith, provider_env: dict[str, str]) -> None:
    settings = settings_with(provider_env, DEERFLOW_MODEL_PRICES=PRICED,
                             DEERFLOW_RUN_COST_BUDGET_USD=str(CROSSED_MID_RESEARCH),
                             DEERFLOW_RUN_COST_BUDGET_USD_MAX="0.018")
    async with worker_with(settings) as client:
        handle = await start(client, auto_accept_plan=True)  # no budget asked: the operator's default
        await wait_for(handle, paused_for_budget)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await decide(handle, BudgetDecision(action=BudgetAction.RAISE, cost_usd=0.0181))
        assert "maximum is $0.0180" in failure_message(refused.value.cause)
        await decide(handle, BudgetDecision(action=BudgetAction.CANCEL))
        cancelled = await cancelled_status(handle)
        assert cancelled.outcome is Outcome.CANCELLED
        assert any("cancelled at its cost budget" in note for note in cancelled.notes)

        greedy = await start(client, auto_accept_plan=True, cost_budget_usd=5.0)
        status = await wait_for(greedy, paused_for_budget)
        assert status.budget is not None and status.budget.cost_usd == 0.018
        assert any("requested cost budget ($5.00) is above the operator's maximum" in note for note in status.notes)
        await decide(greedy, BudgetDecision(action=BudgetAction.FINISH))
        await greedy.result()


async def test_a_run_given_only_a_token_budget_is_bounded_by_the_operator_cost_maximum(
        worker_with: WorkerWith, provider_env: dict[str, str]) -> None:
    settings = settings_with(provider_env, DEERFLOW_MODEL_PRICES=PRICED,
                             DEERFLOW_RUN_COST_BUDGET_USD_MAX=str(CROSSED_MID_RESEARCH))
    async with worker_with(settings) as client:
        handle = await start(client, auto_accept_plan=True, token_budget=1_000_000)  # names no cost budget
        status = await wait_for(handle, paused_for_budget)
        assert status.budget is not None and status.budget.tokens == 1_000_000
        assert status.budget.cost_usd == CROSSED_MID_RESEARCH, "the operator's maximum is its cost budget"
        await decide(handle, BudgetDecision(action=BudgetAction.FINISH))
        assert (await handle.result()).usage.cost_usd <= CROSSED_MID_RESEARCH
