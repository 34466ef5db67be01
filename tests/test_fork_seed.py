"""What a fork reuses of its source's state (workflows/research/fork_seed.py), for sources the workflow tests do
not reach cheaply: several planning rounds, a run that failed in its steps, one continued as new; the
fork point's own checks; and how a source's forks are found on a namespace without our attributes."""

from __future__ import annotations

from typing import Any, cast

import pytest
from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from runtime.forks import forks_of
from runtime.run_memo import run_memo
from workflows.contracts.chat import ChatMessage
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.fork_point import ForkPoint, ForkStage
from workflows.contracts.plan import Plan, Step
from workflows.contracts.status import Phase, PlanVersion, RunProgress, StepState, StepStatus
from workflows.research.fork_seed import ForkRefused, fork_seed, planning_input
from workflows.research.run_state import RunState

TASK = ChatMessage(role="user", content="solid-state batteries")
BACKGROUND = ChatMessage(role="user", name="background_investigation", content="background investigation results")


def source(findings: list[str | None], observations: list[str], **state: Any) -> RunState:
    """A source whose last plan has one step per finding (None: not run), with ``observations``."""
    plan = Plan(title="Batteries", steps=[Step(title=f"Step {index + 1}", description=f"Do {index + 1}",
                                                execution_res=finding) for index, finding in enumerate(findings)])
    steps = [StepStatus(index=index, title=step.title, step_type=step.step_type,
                        state=StepState.DONE if step.execution_res is not None else StepState.PENDING)
             for index, step in enumerate(plan.steps)]
    progress = RunProgress(phase=Phase.COMPLETED, steps=steps,
                           plan_history=[PlanVersion(version=1, plan=plan.model_copy(deep=True))])
    return RunState(status=progress, plan=plan, observations=observations, planner_messages=[TASK, BACKGROUND],
                    locale="en-US", **{"plan_iterations": 1, **state})


def point(stage: ForkStage, step: int | None = None, edit: str | None = None) -> ForkPoint:
    return ForkPoint(workflow_id="research-batteries", stage=stage, step=step, edit=edit)


def test_a_later_planning_round_keeps_the_earlier_rounds_findings_and_drops_its_own() -> None:
    state = source(["b1", "b2", "b3"], ["a1", "a2", "b1", "b2", "b3"], plan_iterations=2)
    seed = fork_seed(state, point(ForkStage.STEP, 2))
    assert seed.observations == ["a1", "a2"]  # the first round's; b1 is in the plan, as its step 1
    assert seed.plan is not None and [step.execution_res for step in seed.plan.steps] == ["b1", None, None]
    assert seed.plan_iterations == 2 and seed.reused_steps == 1
    report = fork_seed(state, point(ForkStage.REPORT))
    assert report.observations == ["a1", "a2", "b1", "b2", "b3"]


def test_a_source_that_failed_in_its_steps_reports_from_the_steps_it_finished() -> None:
    # The step loop adds its findings to the observations only when it ends: a failed one never did.
    state = source(["b1", None, None], ["a1"])
    state.status.steps[1].state = StepState.RUNNING
    assert fork_seed(state, point(ForkStage.REPORT)).observations == ["a1", "b1"]
    assert fork_seed(state, point(ForkStage.STEP, 2)).observations == ["a1"]
    with pytest.raises(ForkRefused, match="never finished step 2: fork it from step 2 at the latest"):
        fork_seed(state, point(ForkStage.STEP, 3))


def test_a_source_continued_as_new_in_its_steps_counts_each_finding_once() -> None:
    # Continue-as-new adds the batch's findings to the checkpoint's observations before the loop ends.
    state = source(["b1", "b2", None], ["a1", "b1", "b2"])
    assert fork_seed(state, point(ForkStage.STEP, 3)).observations == ["a1"]
    assert fork_seed(state, point(ForkStage.REPORT)).observations == ["a1", "b1", "b2"]


def test_a_finding_repeated_from_an_earlier_round_is_not_taken_for_this_plans() -> None:
    state = source(["same", "b2"], ["same", "same", "b2"])
    assert fork_seed(state, point(ForkStage.STEP, 1)).observations == ["same"]


def test_the_step_edit_replaces_its_description_and_nothing_else() -> None:
    state = source(["b1", "b2", "b3"], ["b1", "b2", "b3"])
    seed = fork_seed(state, point(ForkStage.STEP, 2, edit="Compare sulfide and oxide"))
    assert seed.plan is not None
    assert [step.description for step in seed.plan.steps] == ["Do 1", "Compare sulfide and oxide", "Do 3"]
    assert state.plan is not None and state.plan.steps[1].description == "Do 2"  # the source's is untouched


def test_the_plan_is_made_again_from_the_planners_first_input_with_the_edit_on_the_latest_plan() -> None:
    state = source(["b1"], ["b1"])
    edit_round = [ChatMessage(role="assistant", content='{"title": "v1"}'),
                  ChatMessage(role="user", name="feedback", content="[EDIT_PLAN] shorter")]
    state.planner_messages = [TASK, BACKGROUND, *edit_round]
    assert planning_input(state.planner_messages) == [TASK, BACKGROUND]
    plain = fork_seed(state, point(ForkStage.PLAN))
    assert plain.planner_messages == [TASK, BACKGROUND] and plain.plan is None and plain.observations == []
    assert plain.plan_iterations == 0 and plain.feedback is None
    edited = fork_seed(state, point(ForkStage.PLAN, edit="add a step on costs"))
    assert edited.planner_messages[:2] == [TASK, BACKGROUND]
    reply, feedback = edited.planner_messages[2:]
    assert reply.role == "assistant" and '"title":"Batteries"' in reply.content
    assert feedback == ChatMessage(role="user", name="feedback", content="[EDIT_PLAN] add a step on costs")
    assert edited.feedback == "[EDIT_PLAN] add a step on costs"


@pytest.mark.parametrize(("state", "at", "refusal"), [
    (RunState(), point(ForkStage.PLAN), "never reached the planner"),
    (RunState(planner_messages=[TASK]), point(ForkStage.REPORT), "never had a plan"),
    (source(["b1"], ["b1"]), point(ForkStage.STEP, 2), r"plan has 1 step\(s\), not 2"),
])
def test_a_point_never_reached_is_refused_saying_what_was(state: RunState, at: ForkPoint, refusal: str) -> None:
    with pytest.raises(ForkRefused, match=refusal):
        fork_seed(state, at)


def test_a_plan_never_started_cannot_be_forked_from_its_steps() -> None:
    state = source([None, None], [])  # reviewed and cancelled, or waiting: no step ever started
    with pytest.raises(ForkRefused, match="never started its plan's steps"):
        fork_seed(state, point(ForkStage.STEP, 1))


@pytest.mark.parametrize(("fields", "problem"), [
    ({"stage": "step"}, "names the step"),
    ({"stage": "report", "step": 2}, "names the step"),
    ({"stage": "step", "step": 21}, "less than or equal to 20"),
    ({"stage": "plan", "edit": "   "}, "the edit is blank"),
    ({"stage": "plan", "checkpoint": {}}, "Extra inputs"),  # no state rides along with a point
])
def test_a_fork_point_says_what_is_wrong_with_it(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        ForkPoint.model_validate({"workflow_id": "research-batteries", **fields})


class Listed:
    """A listed run with a memo, as ``list_workflows`` gives it."""

    def __init__(self, workflow_id: str, memo: dict[str, Any]) -> None:
        self.id, self.memo, self.status = workflow_id, memo, WorkflowExecutionStatus.COMPLETED

    async def memo_value(self, key: str, default: Any = None) -> Any:
        return self.memo.get(key, default)


class NoAttributes:
    """A client on a namespace without our search attributes: the query by attribute is refused."""

    def __init__(self, runs: list[Listed]) -> None:
        self.runs, self.queries = runs, []

    def list_workflows(self, query: str, limit: int) -> Any:
        self.queries.append(query)

        async def listing() -> Any:
            if "DeerFlowForkedFrom" in query:
                raise RPCError("invalid query: unknown search attribute", RPCStatusCode.INVALID_ARGUMENT, b"")
            for run in self.runs[:limit]:
                yield run
        return listing()


async def test_without_the_attribute_the_forks_are_found_by_their_memos() -> None:
    alice = Actor(name="alice", via=Via.API)
    at_step = ForkPoint(workflow_id="research-batteries", stage=ForkStage.STEP, step=2)
    runs = [Listed("research-batteries-fork-1", run_memo("q", alice, at_step)),
            Listed("research-other-fork-2", run_memo("q", alice, at_step.model_copy(update={"workflow_id": "x"}))),
            Listed("research-batteries", run_memo("q", alice)),
            Listed("research-forged", {"forked_from": "research-batteries"})]  # not a memo a door writes
    client = NoAttributes(runs)
    forks = await forks_of(cast(Client, client), "research-batteries")
    assert [(fork.workflow_id, fork.at, fork.started_by, fork.status) for fork in forks] == [
        ("research-batteries-fork-1", "step 2", alice, "completed")]
    assert len(client.queries) == 2 and "DeerFlowForkedFrom = 'research-batteries'" in client.queries[0]
