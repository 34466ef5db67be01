"""One research run as its stages see it: the request, held here once, the run's state, and what
is rebuilt from them at run time (activity slots, the crawl cache, the queue routing).

The stages (coordination, planner, plan review, step loop, reporter) are functions of a
``ResearchRun``; the workflow builds one when it has accepted its input and tells the story.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_slots import ActivitySlots
    from workflows.calls.queues import QueueRouting
    from workflows.contracts.plan import Plan
    from workflows.contracts.research import ResearchRequest, ResearchResult
    from workflows.contracts.run_config import RunConfig
    from workflows.contracts.status import Awaiting, Phase
    from workflows.contracts.tool_activities import CrawlResult
    from workflows.research.review import Inbox
    from workflows.research.run_state import RunState


class ReviewTimedOut(Exception):
    """Nobody answered before ``review_timeout``."""


class RunEnded(Exception):
    """The run ends early with ``result``: a direct reply, no usable plan, or a review not given in time.

    Raised from deep in a stage so that the workflow's ``run`` keeps one exit for every ending.
    """

    def __init__(self, result: ResearchResult) -> None:
        super().__init__(result.outcome.value)
        self.result = result


class ResearchRun:
    """The request, the state and the run-time resources every stage works with."""

    def __init__(self, request: ResearchRequest, state: RunState, inbox: Inbox) -> None:
        self.request = request
        self.state = state
        self.inbox = inbox  # filled by the workflow's signal and update handlers
        self.slots = ActivitySlots(state.config.max_activities_in_flight)
        # Crawls of this run by normalised URL (workflows/research/tools.py: ToolContext.crawls).
        self.crawls: dict[str, asyncio.Task[CrawlResult]] = {}
        self.budget_lock = asyncio.Lock()  # one budget pause at a time (workflows/research/budget.py)

    @property
    def routing(self) -> QueueRouting:
        """Where this run's activities go, as its config says now (before it arrives: own queues)."""
        return QueueRouting(frozenset(self.state.config.main_queue_kinds))

    def use_config(self, config: RunConfig) -> None:
        self.state.config = config
        self.slots = ActivitySlots(config.max_activities_in_flight)

    def current_plan(self) -> Plan:
        plan = self.state.plan
        if plan is None:  # steps and the report come after a plan was adopted
            raise ApplicationError("No plan to run", type="InternalError", non_retryable=True)
        return plan

    def prompt_vars(self, locale: str) -> dict[str, str]:
        return {"CURRENT_TIME": workflow.now().strftime("%a %b %d %Y %H:%M:%S %z"), "locale": locale}

    def await_person(self, phase: Phase, what: Awaiting) -> None:
        """Enter a phase that waits for a person, saying since when and until when."""
        now = workflow.now()
        self.state.status.awaiting_since = now.isoformat()
        self.state.status.review_deadline = (now + self.request.review_timeout).isoformat()
        self.state.enter(phase, awaiting=what)

    async def wait_for_person(self, ready: Callable[[], bool], summary: str) -> None:
        """A durable wait bounded by ``review_timeout``: no worker memory is held while it lasts."""
        try:
            await workflow.wait_condition(ready, timeout=self.request.review_timeout, timeout_summary=summary)
        except TimeoutError as error:
            self.state.status.awaiting = None
            raise ReviewTimedOut(summary) from error
