"""The bench's reviewer (issue #24): a person who wants the question researched.

Why: a 135M model claims the planner has enough context about as often as not, and an auto-accepted
plan that claims it ends the research before any step runs (the report says so at its top). What
the bench measures is whether the steps search, so it reviews each plan as a person would: a plan
without steps goes back to the planner with an edit asking for research (at most ``MAX_EDITS``
times), any other plan is accepted. It uses the run's own review protocol (``review_plan``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import WorkflowHandle

from runtime import research_client
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.status import Awaiting, Phase

MAX_EDITS = 3
RESEARCH_PLEASE = ("[EDIT_PLAN] Do not answer from what you know: plan one research step that searches the web "
                   "for this question, with has_enough_context false.")
REVIEWER = Actor(name="bench", via=Via.CLI)
POLL_SECONDS = 1.0


class PlanReviewer:
    """Reviews one run's plans while :meth:`review` runs (the bench cancels it once the run ends)."""

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.handle = handle
        self.edits = 0

    async def review(self) -> None:
        reviewed = 0
        while True:
            status = await research_client.status(self.handle)
            waiting = status.phase is Phase.AWAITING_REVIEW and status.awaiting is Awaiting.PLAN_FEEDBACK
            if waiting and status.plan is not None and len(status.plan_history) > reviewed:
                reviewed = len(status.plan_history)
                if (not status.plan.steps or status.plan.has_enough_context) and self.edits < MAX_EDITS:
                    self.edits += 1
                    await research_client.review_plan(self.handle, RESEARCH_PLEASE, REVIEWER)
                else:
                    await research_client.review_plan(self.handle, "[ACCEPTED]", REVIEWER)
            await asyncio.sleep(POLL_SECONDS)
