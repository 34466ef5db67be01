"""A run's history read back as stages and calls: the ``RunInspection`` every view shows.

Why from history: every fact is already there and nothing is added to the workflow. Each activity's
input and result (the model's messages and reply, a search's results, a crawled page), its
attempts (the last attempt's start and worker, the failure the retry followed, the final failure),
the timeline line the workflow gave it, the waits for a person and every message sent to the run
with its sender. A history exported on one machine is inspected the same on another.

Stages are read from the lines the workflow gives its calls (workflows/calls/activity_options.py and the
``summary=`` of each call): "planner · v2", "researcher · step 2 · turn 3", "reporter"; a tool
activity belongs to the stage of the model turn whose tool call it runs (runtime/activity_io.py),
the first web search before any plan to the background investigation, and each wait for a person
(a durable timer named "plan review deadline", …) is a stage of its own. Nothing here runs a
regular expression over the run's text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from runtime.activity_io import runs_call
from runtime.inspection_decode import Key, Unreadable
from runtime.inspection_messages import Messages
from runtime.inspection_model import (
    AttemptFailure,
    Call,
    CallState,
    CallUsage,
    ForkLink,
    Part,
    RunInspection,
    Stage,
    Wait,
)
from runtime.inspection_parts import Conversations, as_json, input_parts, output_parts
from workflows.contracts.chat import ChatResponse, ToolCall
from workflows.contracts.plan import Plan
from workflows.contracts.research import ResearchRequest, ResearchResult
from workflows.contracts.usage import COST_DIGITS, Usage

E = EventType
MAX_PROBLEMS = 50
# The durable waits for a person (workflows/research/research_run.py: wait_for_person), by their timer's line.
WAITS = {"plan review deadline": "plan review", "clarification deadline": "clarification",
         "budget decision deadline": "budget decision"}
CLOSED = {E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "completed", E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
          E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "cancelled",
          E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
          E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed out",
          E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "continued as new"}
CALL_ENDS = {E.EVENT_TYPE_ACTIVITY_TASK_FAILED: ("failed", "activity_task_failed_event_attributes"),
             E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: ("timed_out", "activity_task_timed_out_event_attributes"),
             E.EVENT_TYPE_ACTIVITY_TASK_CANCELED: ("cancelled", "activity_task_canceled_event_attributes")}


@dataclass(frozen=True)
class PendingAttempt:
    """An attempt in flight on a live run, as the server describes it (history has it only once it ends)."""

    activity_id: str
    state: CallState
    attempt: int
    last_started: datetime | None
    last_failure: str | None  # the previous attempt's


def at(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


class InspectionBuilder:
    """Reads a run chain's histories, run by run and event by event, into one ``RunInspection``."""

    def __init__(self, workflow_id: str, source: str) -> None:
        self.inspection = RunInspection(workflow_id=workflow_id, run_ids=[], workflow_type="", source=source,
                                        status="running")
        self.run = -1
        self.values: dict[Key, Any] = {}
        self.stages: dict[str, Stage] = {}
        self.current: Stage | None = None
        self.calls: dict[tuple[int, int], Call] = {}
        self.by_activity: dict[str, Call] = {}  # the last run's calls by activity id, for pending attempts
        self.stage_of: dict[str, Stage] = {}  # by call id
        self.tool_calls: list[tuple[ToolCall, Stage]] = []  # made by a model, not yet matched to an activity
        self.waits: dict[int, tuple[Stage, Wait]] = {}  # by the timer's started event id
        self.conversations = Conversations()
        self.messages = Messages(self)
        self.plan: Plan | None = None
        self.seen_problems: set[str] = set()

    def add_run(self, events: Sequence[HistoryEvent], values: dict[Key, Any]) -> None:
        """One run of the chain (the next), with its values decoded (runtime/inspection_decode.py)."""
        self.run += 1
        self.values, self.by_activity, self.waits = values, {}, {}
        for event in events:
            handler = _HANDLERS.get(event.event_type)
            if handler is not None:
                handler(self, event)

    def value(self, event: HistoryEvent, slot: str) -> Any:
        return self.values.get((event.event_id, slot))

    def readable(self, value: Any, parts: Callable[[Any], list[Part]]) -> list[Part]:
        """``parts(value)``, or the reason it cannot be read (also listed among the run's problems)."""
        if isinstance(value, Unreadable):
            self.problem(f"a payload could not be read: {value.reason}")
            return [Part(label="unreadable", text=value.reason)]
        return parts(value) if value is not None else []

    def problem(self, text: str) -> None:
        """A problem, once; past ``MAX_PROBLEMS`` (a history of many bad messages) only counted."""
        if text in self.seen_problems:
            return
        self.seen_problems.add(text)
        if len(self.inspection.problems) < MAX_PROBLEMS:
            self.inspection.problems.append(text)

    def finish(self, pending: Sequence[PendingAttempt] = ()) -> RunInspection:
        """The inspection, with the attempts still in flight (a live run's) and each stage's and the
        run's bounds, tokens and cost."""
        for attempt in pending:
            call = self.by_activity.get(attempt.activity_id)
            if call is not None and call.closed_at is None:
                call.state, call.attempts = attempt.state, attempt.attempt
                call.started_at = attempt.last_started or call.started_at
                if attempt.last_failure is not None:
                    call.failures.append(AttemptFailure(attempt=attempt.attempt - 1, message=attempt.last_failure))
        for stage in self.inspection.stages:
            _bound(stage)
            if self.plan is not None and stage.key.startswith("step "):
                number = stage.key.removeprefix("step ")
                if number.isdigit() and 0 < int(number) <= len(self.plan.steps):
                    stage.title += f": {self.plan.steps[int(number) - 1].title}"
        _total(self.inspection)
        if (more := len(self.seen_problems) - MAX_PROBLEMS) > 0:
            self.inspection.problems.append(f"… and {more} more problems")
        return self.inspection

    # ------------------------------------------------------------------ the run

    def _started(self, event: HistoryEvent) -> None:
        attributes = event.workflow_execution_started_event_attributes
        self.inspection.run_ids.append(attributes.original_execution_run_id)
        if self.run == 0:
            self.inspection.workflow_type = attributes.workflow_type.name
            self.inspection.started_at = at(event)
            request = self.value(event, "input")
            self.inspection.request = self.readable(request, _request_parts)
            if isinstance(request, ResearchRequest) and request.forked_from is not None:
                source = request.forked_from
                self.inspection.forked_from = ForkLink(workflow_id=source.workflow_id, at=source.at)
        self.inspection.status = "running"

    def _closed(self, event: HistoryEvent) -> None:
        self.inspection.status = CLOSED[event.event_type]
        self.inspection.closed_at = at(event)
        if event.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            self.inspection.result = self.readable(self.value(event, "result"), self._result_parts)
        elif event.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            self.inspection.result = [Part(label="failure", text=str(self.value(event, "failure")))]
        elif event.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            self.messages.terminated(event)

    def _result_parts(self, value: Any) -> list[Part]:
        if not isinstance(value, ResearchResult):
            return [Part(label="result", text=as_json(value), format="json")]
        self.plan = value.plan or self.plan
        parts = [Part(label="outcome", text=value.outcome.value + (f": {value.error}" if value.error else ""))]
        parts += [Part(label="note", text=note) for note in value.notes]
        return [*parts, Part(label="report", text=value.report, format="markdown")] if value.report else parts

    def _task_failed(self, event: HistoryEvent) -> None:
        identity = event.workflow_task_failed_event_attributes.identity or "a worker"
        self.problem(f"run {self.run}, event {event.event_id}: a workflow task failed on {identity}: "
                     f"{self.value(event, 'failure')}")

    # ------------------------------------------------------------------ calls

    def _scheduled(self, event: HistoryEvent) -> None:
        attributes = event.activity_task_scheduled_event_attributes
        activity = attributes.activity_type.name
        summary, request = self.value(event, "summary"), self.value(event, "input")
        title = summary if isinstance(summary, str) and summary else activity
        stage = self._stage_for(activity, title, request, at(event))
        call = Call(id=f"{self.run}.{event.event_id}", event_id=event.event_id, activity=activity, title=title,
                    state="scheduled", scheduled_at=at(event),
                    input=self.readable(request, lambda value: input_parts(activity, title, value, self.conversations)))
        stage.calls.append(call)
        self.calls[(self.run, event.event_id)] = call
        self.by_activity[attributes.activity_id] = call
        self.stage_of[call.id] = stage

    def _call(self, scheduled_event_id: int) -> Call | None:
        return self.calls.get((self.run, scheduled_event_id))

    def _attempt_started(self, event: HistoryEvent) -> None:
        attributes = event.activity_task_started_event_attributes
        call = self._call(attributes.scheduled_event_id)
        if call is None:
            return
        call.state, call.started_at, call.attempts = "running", at(event), attributes.attempt
        call.worker = attributes.identity or None
        if attributes.HasField("last_failure"):
            call.failures.append(AttemptFailure(attempt=attributes.attempt - 1,
                                                message=str(self.value(event, "failure"))))

    def _completed(self, event: HistoryEvent) -> None:
        call = self._call(event.activity_task_completed_event_attributes.scheduled_event_id)
        if call is None:
            return
        self._close(call, "completed", at(event))
        result = self.value(event, "result")
        call.output = self.readable(result, output_parts)
        if isinstance(result, ChatResponse):
            call.usage = _call_usage(result.usage)
            stage = self.stage_of[call.id]
            self.tool_calls += [(tool_call, stage) for tool_call in result.message.tool_calls]
            if stage.key.startswith("planner"):
                self.plan = _plan_in(result.message.content) or self.plan

    def _ended(self, event: HistoryEvent) -> None:
        state, field = CALL_ENDS[event.event_type]
        call = self._call(getattr(event, field).scheduled_event_id)
        if call is None:
            return
        self._close(call, state, at(event))
        if (failure := self.value(event, "failure")) is not None:
            call.failures.append(AttemptFailure(attempt=max(call.attempts, 1), message=str(failure)))

    @staticmethod
    def _close(call: Call, state: Any, closed_at: datetime) -> None:
        call.state, call.closed_at = state, closed_at
        if call.started_at is not None:
            call.duration_seconds = (closed_at - call.started_at).total_seconds()

    # ------------------------------------------------------------------ stages

    def stage(self, key: str, title: str, since: datetime) -> Stage:
        """The stage ``key``, opened now if it is new; it becomes the current one."""
        found = self.stages.get(key)
        if found is None:
            found = self.stages[key] = Stage(key=key, title=title, started_at=since)
            self.inspection.stages.append(found)
        self.current = found
        return found

    def _stage_for(self, activity: str, title: str, request: Any, since: datetime) -> Stage:
        if activity == "chat":
            agent, _, rest = title.partition(" · ")
            part = rest.split(" · ")[0]
            if part.startswith("step "):
                stage = self.stage(part, f"{part} · {agent}", since)
            else:
                stage = self.stage(f"{agent} · {part}" if agent == "planner" and part else agent, title, since)
            # The stage's earlier tool calls have run (or were dropped) by its next turn: none is left to match.
            self.tool_calls = [entry for entry in self.tool_calls if entry[1] is not stage]
            return stage
        made_by = next((entry for entry in self.tool_calls if runs_call(entry[0], activity, request)), None)
        if made_by is not None:
            self.tool_calls.remove(made_by)
            self.current = made_by[1]
            return made_by[1]
        _, _, step = title.partition(" · ")
        if step.startswith("step "):
            return self.stage(step, step, since)
        if activity == "load_run_config":
            return self.stage("setup", "setup: the run's configuration", since)
        if activity == "web_search" and not any(key.startswith("planner") for key in self.stages):
            return self.stage("background investigation", "background investigation", since)
        return self.current or self.stage(activity, title, since)

    def _timer_started(self, event: HistoryEvent) -> None:
        what = WAITS.get(self.value(event, "summary") or "")
        if what is None:
            return
        stage = self.stage(f"{what} · {self.run}.{event.event_id}", what, at(event))
        wait = Wait(title=what, started_at=at(event), deadline=at(event) + _timeout(event))
        stage.waits.append(wait)
        self.waits[event.event_id] = (stage, wait)

    def _timer_ended(self, event: HistoryEvent) -> None:
        fired = event.event_type == E.EVENT_TYPE_TIMER_FIRED
        attributes = event.timer_fired_event_attributes if fired else event.timer_canceled_event_attributes
        found = self.waits.get(attributes.started_event_id)
        if found is not None:
            found[1].ended, found[1].ended_at = ("timed out" if fired else "answered"), at(event)

    def open_wait(self) -> Stage | None:
        """The stage of the wait a person's message most likely answers: the latest still waiting."""
        waiting = [stage for stage, wait in self.waits.values() if wait.ended == "waiting"]
        return waiting[-1] if waiting else None


def _bound(stage: Stage) -> None:
    """A stage's start, end (None while any of its calls or waits is open) and tokens and cost."""
    starts = [call.scheduled_at for call in stage.calls] + [wait.started_at for wait in stage.waits]
    stage.started_at = min(starts, default=stage.started_at)
    ends = [call.closed_at for call in stage.calls] + [wait.ended_at for wait in stage.waits]
    stage.ended_at = None if None in ends or not ends else max(end for end in ends if end is not None)
    usages = [call.usage for call in stage.calls if call.usage is not None]
    stage.input_tokens = sum(usage.input_tokens for usage in usages)
    stage.output_tokens = sum(usage.output_tokens for usage in usages)
    stage.cost_usd = round(sum(usage.cost_usd for usage in usages), COST_DIGITS)


def _total(inspection: RunInspection) -> None:
    inspection.input_tokens = sum(stage.input_tokens for stage in inspection.stages)
    inspection.output_tokens = sum(stage.output_tokens for stage in inspection.stages)
    inspection.cost_usd = round(sum(stage.cost_usd for stage in inspection.stages), COST_DIGITS)
    inspection.unpriced_models = sorted({model for call in inspection.calls
                                         if call.usage and call.usage.model and not call.usage.priced
                                         for model in call.usage.model.split(", ")})


def _timeout(event: HistoryEvent) -> Any:
    return event.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()


def _request_parts(value: Any) -> list[Part]:
    return [Part(label="request", text=as_json(value), format="json")]


def _plan_in(reply: str) -> Plan | None:
    """The plan in a planner's reply when it is plain JSON (the step titles of the stages); else None."""
    try:
        return Plan.model_validate_json(reply)
    except ValidationError:
        return None


def _call_usage(usage: Usage) -> CallUsage:
    models = sorted(usage.by_model)
    return CallUsage(model=", ".join(models) or None, input_tokens=usage.input_tokens,
                     output_tokens=usage.output_tokens, total_tokens=usage.total_tokens, cost_usd=usage.cost_usd,
                     priced=bool(models) and all(part.price is not None for part in usage.by_model.values()))


_HANDLERS: dict[int, Callable[[InspectionBuilder, HistoryEvent], None]] = {
    E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: InspectionBuilder._started,
    **{kind: InspectionBuilder._closed for kind in CLOSED},
    E.EVENT_TYPE_WORKFLOW_TASK_FAILED: InspectionBuilder._task_failed,
    E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: InspectionBuilder._scheduled,
    E.EVENT_TYPE_ACTIVITY_TASK_STARTED: InspectionBuilder._attempt_started,
    E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: InspectionBuilder._completed,
    **{kind: InspectionBuilder._ended for kind in CALL_ENDS},
    E.EVENT_TYPE_TIMER_STARTED: InspectionBuilder._timer_started,
    E.EVENT_TYPE_TIMER_FIRED: InspectionBuilder._timer_ended,
    E.EVENT_TYPE_TIMER_CANCELED: InspectionBuilder._timer_ended,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: lambda builder, event: builder.messages.signaled(event),
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: lambda builder, event: builder.messages.update_accepted(event),
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED: lambda builder, event: builder.messages.update_completed(event),
    E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED: lambda builder, event: builder.messages.cancel_requested(event),
}
