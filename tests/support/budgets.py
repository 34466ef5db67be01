"""What the budget tests share (tests/test_budget.py, tests/test_cost_budget.py): when a run is
paused at its budget, deciding as a named person, and how many of its steps ran."""

from __future__ import annotations

from temporalio.client import WorkflowHandle

from workflows.contracts.budget import BudgetDecision
from workflows.contracts.decisions import Actor
from workflows.contracts.research import ResearchResult
from workflows.contracts.status import Awaiting, Phase, RunStatus


def paused_for_budget(status: RunStatus) -> bool:
    return status.phase is Phase.AWAITING_BUDGET and status.awaiting is Awaiting.BUDGET


async def decide(handle: WorkflowHandle, decision: BudgetDecision, by: Actor) -> None:
    """The ``decide_budget`` update, as a front door sends it."""
    await handle.execute_update("decide_budget", args=[decision, by])


def steps_run(result: ResearchResult) -> int:
    assert result.plan is not None
    return sum(step.execution_res is not None for step in result.plan.steps)
