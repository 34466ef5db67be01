"""Which plan steps must finish before a step may start, when steps run in parallel.

DeerFlow runs steps strictly in order. With ``parallel_steps`` a research step needs only the
steps it declares in ``depends_on``; a processing or analysis step, which works on findings,
needs the steps it declares or else every earlier step. Only earlier steps count, so the
dependencies can never form a cycle, whatever the planner wrote.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.plan import Plan, StepType


def step_dependencies(plan: Plan, index: int) -> set[int]:
    step = plan.steps[index]
    if step.depends_on:
        return {dependency for dependency in step.depends_on if 0 <= dependency < index}
    if step.step_type is StepType.RESEARCH:
        return set()
    return set(range(index))
