"""Sample run statuses and scripted runs, shared by the tests of every status view.

The live view (cli/watch.py), the status command and the shared status wording are tested against
the same plausible run, so a change of wording shows up in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle

from cli.watch import Described
from workflows.contracts.plan import Plan, Step, StepType
from workflows.contracts.status import Phase, PlanVersion, ProgressEvent, RunStatus, StepState, StepStatus
from workflows.contracts.usage import Usage

T0 = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)


def at(seconds: float, base: datetime = T0) -> str:
    return (base + timedelta(seconds=seconds)).isoformat()


def sample_status(**changes: Any) -> RunStatus:
    plan = Plan(title="Solid-state batteries", steps=[
        Step(title="Background and key facts"), Step(title="Cost data", step_type=StepType.PROCESSING),
        Step(title="Outlook", step_type=StepType.ANALYSIS),
    ])
    status = RunStatus(
        phase=Phase.RESEARCHING, started_at=at(0), plan=plan, plan_history=[PlanVersion(version=1, plan=plan)],
        steps=[
            StepStatus(index=0, title="Background and key facts", step_type=StepType.RESEARCH, state=StepState.DONE,
                       started_at=at(10), finished_at=at(75),
                       finding_preview="## Findings\n**Solid electrolytes** replace the liquid one."),
            StepStatus(index=1, title="Cost data", step_type=StepType.PROCESSING, state=StepState.RUNNING,
                       started_at=at(75)),
            StepStatus(index=2, title="Outlook", step_type=StepType.ANALYSIS, state=StepState.PENDING),
        ],
        usage=Usage(llm_calls=7, input_tokens=12_000, output_tokens=3_456, total_tokens=15_456),
        events=[ProgressEvent(at=at(0), kind="phase", message="coordinating"),
                ProgressEvent(at=at(75), kind="step_done", message="Background and key facts", step_index=0)],
    )
    return status.model_copy(update=changes)


Poll = tuple[WorkflowExecutionStatus | Described | BaseException, Callable[[], RunStatus] | BaseException]


class ScriptedRun:
    """Plays a list of polls: what describe says, and what the status query returns or raises."""

    def __init__(self, polls: list[Poll]) -> None:
        self.polls = polls
        self.position = -1

    async def describe(self, _handle: Any) -> Described:
        self.position = min(self.position + 1, len(self.polls) - 1)
        state = self.polls[self.position][0]
        if isinstance(state, BaseException):
            raise state
        return state if isinstance(state, Described) else Described(state)

    async def query(self, _handle: Any) -> RunStatus:
        answer = self.polls[self.position][1]
        if isinstance(answer, BaseException):
            raise answer
        return answer()


class FakeHandle:
    id = "research-scripted"
    run_id = None


def handle() -> WorkflowHandle[Any, Any]:
    return cast(WorkflowHandle[Any, Any], FakeHandle())
