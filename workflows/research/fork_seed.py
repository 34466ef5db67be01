"""What a fork reuses of its source run: the source's state read back (its ``checkpoint``), cut at the
fork's point. Pure, so the workflow derives it from the recorded state on every replay, and the front
doors refuse a point the source never reached before they start anything.

The source's state came from a run whose models wrote much of it (plans, findings): it arrives
validated by the run's own contracts (``RunState``), and only text a run already holds is reused. Its
configuration (the operator's limits), usage, budget and decisions stay the source's: the fork loads
its own config, and starts with nothing spent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from workflows.contracts.chat import ChatMessage
from workflows.contracts.fork_point import ForkPoint, ForkStage
from workflows.contracts.plan import Plan
from workflows.contracts.status import StepState
from workflows.research.review import EDIT_PLAN
from workflows.research.run_state import RunState


class ForkRefused(ValueError):
    """The source never reached the fork's point; the message says what it did reach."""


@dataclass(frozen=True)
class ForkSeed:
    """The state a fork starts from."""

    planner_messages: list[ChatMessage]
    plan: Plan | None  # None: the fork plans again
    observations: list[str]  # findings of the plans before ``plan``, or of all of them for the report
    plan_iterations: int
    locale: str | None
    feedback: str | None = None  # the plan edit, as review feedback (a fork from the plan)
    reused_steps: int = 0


def fork_seed(source: RunState, point: ForkPoint) -> ForkSeed:
    """The state a fork at ``point`` starts from; ``ForkRefused`` if ``source`` never got there."""
    if point.stage is ForkStage.PLAN:
        return _from_plan(source, point)
    plan = source.plan
    if plan is None:
        raise ForkRefused(f"run {point.workflow_id} never had a plan: fork it from the plan, if it reached the "
                          "planner, or start a new run")
    earlier = _earlier_findings(source, plan)
    if point.stage is ForkStage.REPORT:
        findings = [step.execution_res for step in plan.steps if step.execution_res is not None]
        return ForkSeed(planner_messages=list(source.planner_messages), plan=plan.model_copy(deep=True),
                        observations=earlier + findings, plan_iterations=source.plan_iterations,
                        locale=source.locale, reused_steps=len(findings))
    return _from_step(source, point, plan, earlier)


def _from_plan(source: RunState, point: ForkPoint) -> ForkSeed:
    """The planner's input before its first reply (the coordinator's handoff, the background
    investigation); an edit follows the source's latest plan as a review's feedback does."""
    if not source.planner_messages:
        raise ForkRefused(f"run {point.workflow_id} never reached the planner (it ended in its "
                          f"{source.status.phase.value} phase): start a new run")
    messages = planning_input(source.planner_messages)
    feedback = None
    if point.edit is not None:
        feedback = f"{EDIT_PLAN} {point.edit}"
        history = source.status.plan_history
        if history:
            messages.append(ChatMessage(role="assistant", content=history[-1].plan.model_dump_json()))
        messages.append(ChatMessage(role="user", name="feedback", content=feedback))
    return ForkSeed(planner_messages=messages, plan=None, observations=[], plan_iterations=0,
                    locale=source.locale, feedback=feedback)


def _from_step(source: RunState, point: ForkPoint, plan: Plan, earlier: list[str]) -> ForkSeed:
    """The plan as its step loop ran it, with the findings of the steps before ``point.step`` and
    the steps from it to run again (the edit: step N's new description)."""
    number = point.step or 1
    if number > len(plan.steps):
        raise ForkRefused(f"run {point.workflow_id}'s plan has {len(plan.steps)} step(s), not {number}")
    if not any(step.state is not StepState.PENDING for step in source.status.steps):
        raise ForkRefused(f"run {point.workflow_id} never started its plan's steps (its plan was not accepted "
                          "or not run): fork it from the plan")
    unfinished = [index + 1 for index, step in enumerate(plan.steps[:number - 1]) if step.execution_res is None]
    if unfinished:
        raise ForkRefused(f"run {point.workflow_id} never finished step {unfinished[0]}: fork it from step "
                          f"{unfinished[0]} at the latest")
    seeded = plan.model_copy(deep=True)
    for step in seeded.steps[number - 1:]:
        step.execution_res = None
    if point.edit is not None:
        seeded.steps[number - 1].description = point.edit
    return ForkSeed(planner_messages=list(source.planner_messages), plan=seeded, observations=earlier,
                    plan_iterations=source.plan_iterations, locale=source.locale, reused_steps=number - 1)


def planning_input(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The planner's messages up to its first reply: each edit round after it added the reply and
    the person's feedback (workflows/research/workflow.py)."""
    replies = [index for index, message in enumerate(messages) if message.role == "assistant"]
    return list(messages[:replies[0]] if replies else messages)


def _earlier_findings(source: RunState, plan: Plan) -> list[str]:
    """The findings of the plans before ``plan`` (a run of several planning rounds): the run's
    observations without those of ``plan``'s own steps, which its step loop adds at their end once
    it is done (or, in a run continued as new, partly before)."""
    own = Counter(step.execution_res for step in plan.steps if step.execution_res is not None)
    observations = list(source.observations)
    while observations and own[observations[-1]] > 0:
        own[observations.pop()] -= 1
    return observations
