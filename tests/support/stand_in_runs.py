"""A stand-in research run for page tests: what our page shows of a run, without running research.

With a report it finishes at once; without one it awaits a plan review (as its ``status`` query
says, even after it ended) until it is cancelled, terminated, timed out or signalled to fail: the
state in which the page once offered "Accept" for a run that could take nothing any more. Like a
real run, it keeps its phase and what it awaits in the search attributes lists read (its worker
registers them first, as ``worker.py`` does).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from runtime.run_memo import run_memo, start_attributes
from runtime.search_attributes import ensure_search_attributes
from tests.support.runs import run_id
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.plan import Plan, Step
from workflows.contracts.research import WORKFLOW_TYPE, ResearchResult
from workflows.contracts.status import Awaiting, Phase, RunStatus
from workflows.research.visibility import AWAITING, PHASE

QUEUE = "stand-in-runs"
STAND_IN = Actor(name="stand-in", via=Via.API)  # who the memo says started a stand-in run
PLAN = Plan(title="Tidal power, step by step", steps=[Step(title="Turbines", description="What they produce")])
FAILURE = "the stand-in's planner gave up"


@workflow.defn(name=WORKFLOW_TYPE, sandboxed=False)  # the module imports test helpers
class StandInRun:
    def __init__(self) -> None:
        self.finished = False
        self.failing = False

    @workflow.run
    async def run(self, report: str, indexed: bool = False) -> ResearchResult:
        if not report:
            if indexed:
                workflow.upsert_search_attributes([PHASE.value_set(Phase.AWAITING_REVIEW.value),
                                                   AWAITING.value_set(Awaiting.PLAN_FEEDBACK.value)])
            await workflow.wait_condition(lambda: self.failing)
            raise ApplicationError(FAILURE, non_retryable=True)
        self.finished = True
        if indexed:
            workflow.upsert_search_attributes([PHASE.value_set(Phase.COMPLETED.value), AWAITING.value_set("")])
        return ResearchResult(report=report, plan=PLAN)

    @workflow.signal
    def fail(self) -> None:
        self.failing = True

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        if self.finished:
            return RunStatus(phase=Phase.COMPLETED, plan=PLAN)
        return RunStatus(phase=Phase.AWAITING_REVIEW, awaiting=Awaiting.PLAN_FEEDBACK, plan=PLAN)


StartStandIn = Callable[..., Awaitable[WorkflowHandle]]


@contextlib.asynccontextmanager
async def stand_in_runs(client: Client) -> AsyncIterator[StartStandIn]:
    """``start(report, question=..., timeout=..., started_by=...)`` starts a stand-in run (with the
    question and its starter in its memo and, where the server indexes them, its search attributes,
    as every real starter sets them); its worker answers the page's queries until the block ends."""
    indexed = await ensure_search_attributes(client)  # not on the time-skipping server
    async with Worker(client, task_queue=QUEUE, workflows=[StandInRun]):
        async def start(report: str, question: str | None = None, timeout: float | None = None,
                        started_by: Actor = STAND_IN) -> WorkflowHandle:
            return await client.start_workflow(
                StandInRun.run, args=[report, indexed], id=run_id("stand-in"), task_queue=QUEUE,
                memo=run_memo(question, started_by) if question else None,
                search_attributes=start_attributes(question, started_by, index_question=True)
                if question and indexed else None,
                execution_timeout=timedelta(seconds=timeout) if timeout else None)
        yield start
