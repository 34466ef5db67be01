"""A research run's status, as the ``status`` query answers it: its phase, what it awaits, its story,
its steps' progress, its plans and who decided (built from the run's state: workflows/research/run_state.py)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, computed_field

from workflows.contracts.base import Contract
from workflows.contracts.budget import BudgetStanding, RunBudget, standing
from workflows.contracts.decisions import Decision
from workflows.contracts.fork_point import ForkPoint
from workflows.contracts.plan import Plan, StepType
from workflows.contracts.research import (
    Outcome,
)
from workflows.contracts.usage import Usage


class Phase(StrEnum):
    STARTING = "starting"
    COORDINATING = "coordinating"
    BACKGROUND_INVESTIGATION = "background_investigation"
    PLANNING = "planning"
    AWAITING_CLARIFICATION = "awaiting_clarification"
    AWAITING_REVIEW = "awaiting_review"
    AWAITING_BUDGET = "awaiting_budget"
    RESEARCHING = "researching"
    REPORTING = "reporting"
    COMPLETED = "completed"
    FAILED = "failed"


class Awaiting(StrEnum):
    """What a paused run needs from a person; each value is also the signal (and update) to send."""

    PLAN_FEEDBACK = "plan_feedback"
    CLARIFICATION = "clarification_answer"
    BUDGET = "budget"


class StepState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


class StepStatus(Contract):
    index: int
    title: str
    step_type: StepType
    state: StepState
    started_at: str | None = None
    finished_at: str | None = None
    finding_preview: str | None = None


class ProgressEvent(Contract):
    """One line of a run's story, for live views; ``at`` is workflow time (ISO 8601)."""

    at: str
    # "ignored": a signal the run dropped (bad or ill-timed), so its sender can see why.
    # "note": something a reader must know about the outcome (RunStatus.notes).
    kind: Literal["phase", "plan", "step_started", "step_done", "review", "clarification", "error", "ignored",
                  "note", "cancel", "budget"]
    message: str
    step_index: int | None = None


class PlanVersion(Contract):
    """A plan the planner wrote, and the feedback that led to it (None for the first)."""

    version: int
    plan: Plan
    feedback: str | None = None
    review: Decision | None = None  # the person's verdict on this version, once given


MAX_EVENTS = 200
# Of those, at most this many "ignored" events: a flood of bad signals cannot push out the run's story.
MAX_IGNORED_EVENTS = 10


class RunProgress(Contract):
    """What a run records as it goes: its phase, its waits, its story, its steps' progress, its
    usage and its ending. Kept in ``RunState.status``; the ``status`` query adds what the rest of the
    state already holds (the plan, its count, the locale, the offline providers) to make a
    ``RunStatus``, so nothing is kept twice."""

    phase: Phase
    awaiting: Awaiting | None = None  # what a person must send next
    awaiting_since: str | None = None
    review_deadline: str | None = None
    question: str | None = None  # the clarifying question, while one is pending
    plan_history: list[PlanVersion] = Field(default_factory=list)
    clarification_rounds: int = 0
    started_at: str | None = None
    events: list[ProgressEvent] = Field(default_factory=list)
    steps: list[StepStatus] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    outcome: Outcome | None = None  # set when the run ends
    notes: list[str] = Field(default_factory=list)  # as ``ResearchResult.notes``, while the run goes on
    budget: RunBudget | None = None  # None until the research starts
    decisions: list[Decision] = Field(default_factory=list)  # who decided what, in order
    forked_from: ForkPoint | None = None  # the run this one is a fork of, and where


class RunStatus(RunProgress):
    """The ``status`` query's answer, built from the run's state (workflows/research/run_state.py)."""

    plan: Plan | None = None
    plan_iterations: int = 0
    locale: str | None = None
    # A bundled offline provider serves the run: which ones in ``offline_providers`` ("model",
    # "search"). Runs from before the list existed set only ``offline_demo``, meaning both.
    offline_demo: bool = False
    offline_providers: list[Literal["model", "search"]] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def budget_standing(self) -> BudgetStanding | None:
        """Spent and remaining, tokens and USD (computed when read: never out of step)."""
        return standing(self.budget, self.usage)
