"""Everything a research run knows, in one serialisable object, and the ways its story is recorded.

The workflow keeps one ``RunState`` (samples-python's ``safe_message_handlers`` shape): stages
read and change it, the ``status`` query shows ``view()`` of it, and continue-as-new hands the
whole of it to the next run. What the status shows beyond the run's progress (the plan, its count,
the locale, the offline providers) is read from the rest of the state when the view is built, so
nothing is copied by hand and nothing can drift.

The recording methods are the only way the run's story changes: each event also refreshes the
Web UI's current details, and each phase the search attributes and the phase counters.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_serializer
from temporalio import workflow

from workflows.contracts.base import Contract
from workflows.contracts.chat import ChatMessage
from workflows.contracts.decisions import Actor, Decision
from workflows.contracts.plan import Plan
from workflows.contracts.run_config import RunConfig
from workflows.contracts.status import (
    MAX_EVENTS,
    MAX_IGNORED_EVENTS,
    Awaiting,
    Phase,
    PlanVersion,
    ProgressEvent,
    RunProgress,
    RunStatus,
    StepState,
    StepStatus,
)
from workflows.research.progress import current_details
from workflows.research.run_metrics import count_phase
from workflows.research.visibility import AWAITING, PHASE, USAGE_MEMO

DEFAULT_LOCALE = "en-US"
# The run keeps what it has spent in its memo (workflows/research/visibility.py USAGE_MEMO): issue #46.
USAGE_MEMO_PATCH = "usage-memo"


class RunState(Contract):
    """The run's state; the continuation checkpoint.

    The serialised shape is that of the checkpoint earlier versions wrote (``status`` the whole
    ``RunStatus``), so a continuation written by either version is read by the other: ``status``
    is written as the view, and read back as the progress (the rest of it is in the state).
    """

    status: RunProgress = Field(default_factory=lambda: RunProgress(phase=Phase.STARTING))
    config: RunConfig = Field(default_factory=RunConfig)
    plan: Plan | None = None  # the plan being reviewed or run; None until the planner wrote one
    plan_iterations: int = 0  # plans accepted and run (DeerFlow's count; edits do not add to it)
    locale: str | None = None  # the run's language; None until the coordinator handed off
    planner_messages: list[ChatMessage] = Field(default_factory=list)
    observations: list[str] = Field(default_factory=list)  # findings of finished steps, in plan order
    _published_usage: dict[str, Any] | None = PrivateAttr(default=None)  # as last put in the memo

    @field_serializer("status")
    def _status_as_view(self, _progress: RunProgress) -> RunStatus:
        return self.view()

    def view(self) -> RunStatus:
        """The ``status`` query's answer: the progress, with the plan, its count, the locale and the
        offline providers read from the rest of the state. Built without validation: every part
        was validated when it entered the state, and the view is built at every event."""
        config = self.config
        offline: list[Literal["model", "search"]] = [
            name for name, on in (("model", config.offline_demo), ("search", config.offline_search)) if on]
        return RunStatus.model_construct(**dict(self.status), plan=self.plan, plan_iterations=self.plan_iterations,
                                         locale=self.locale, offline_demo=bool(offline), offline_providers=offline)

    @property
    def report_locale(self) -> str:
        """The locale the planner, the steps and the reporter write in (set by the handoff)."""
        return self.locale or DEFAULT_LOCALE

    # ------------------------------------------------------------------ recording the story

    def record(self, kind: str, message: str, step_index: int | None = None) -> None:
        """One line of the run's story; a flood of ignored signals keeps only its latest few."""
        events = self.status.events
        events.append(ProgressEvent(at=workflow.now().isoformat(), kind=kind,  # type: ignore[arg-type]
                                    message=message, step_index=step_index))
        if kind == "ignored":
            ignored = [index for index, event in enumerate(events) if event.kind == "ignored"]
            for index in reversed(ignored[:-MAX_IGNORED_EVENTS]):
                del events[index]
        del events[:-MAX_EVENTS]
        workflow.set_current_details(current_details(self.view()))

    def enter(self, phase: Phase, awaiting: Awaiting | None = None) -> None:
        self.status.phase = phase
        self.status.awaiting = awaiting
        if self.config.search_attributes_enabled:
            self.upsert_phase()
        self.publish_usage()
        self.record("phase", phase.value + (f" (awaiting {awaiting.value})" if awaiting else ""))
        count_phase(phase, self.status.outcome)

    def publish_usage(self) -> None:
        """What the run has spent, in its memo when it changed (at each phase, step and cancel): a
        listing carries memos, so ``list``, ``costs`` and the page read spend without a query per
        run, which with a thousand runs paused would be a thousand replays (issue #46)."""
        spent = self.status.usage.model_dump(mode="json")
        if spent != self._published_usage and workflow.patched(USAGE_MEMO_PATCH):
            workflow.upsert_memo({USAGE_MEMO: spent})
            self._published_usage = spent

    def upsert_phase(self) -> None:
        awaiting = self.status.awaiting
        workflow.upsert_search_attributes([PHASE.value_set(self.status.phase.value),
                                           AWAITING.value_set(awaiting.value if awaiting else "")])

    def note(self, note: str) -> None:
        """Something a reader must know about the outcome: in status, events and the result."""
        if note not in self.status.notes:
            self.status.notes.append(note)
            self.record("note", note)

    def decide(self, kind: Literal["plan_review", "clarification", "cancel", "budget"], decision: str,
               by: Actor) -> None:
        """A person's decision: kept with who made it (status, result), and told in the run's story;
        a plan review is also kept on the plan version it judged."""
        made = Decision(at=workflow.now().isoformat(), kind=kind, decision=decision, by=by)
        self.status.decisions.append(made)
        if kind == "plan_review" and self.status.plan_history:
            self.status.plan_history[-1].review = made
        self.record("review" if kind == "plan_review" else kind, f"{decision} (by {by})")

    def show_plan(self, plan: Plan, feedback: str | None) -> None:
        """Adopt ``plan``: the run's plan now, a new version in its history, its steps' progress."""
        self.plan = plan
        history = self.status.plan_history
        history.append(PlanVersion(version=len(history) + 1, plan=plan.model_copy(deep=True), feedback=feedback))
        self.status.steps = [
            StepStatus(index=index, title=step.title, step_type=step.step_type,
                       state=StepState.DONE if step.execution_res is not None else StepState.PENDING)
            for index, step in enumerate(plan.steps)
        ]
        self.record("plan", f"Plan v{len(history)}: {plan.title} ({len(plan.steps)} steps)")


class RunContinuation(Contract):
    """The second start argument of a continued run: its checkpoint and the run that wrote it.

    Accepted only when ``written_by_run_id`` is the run this one continues (workflows/research/run_input.py).
    """

    checkpoint: RunState
    written_by_run_id: str
