"""A fork's opening: the run's config and its source's state, read side by side, and the source's
results before the fork's point adopted as this run's own (workflows/research/fork_seed.py says what).

Why a new run seeded from the source, not Temporal's reset: a reset replays the source's own request
(a new report style, locale or edit would have to reach the run as a message it waits for), and a
reset of a closed run replaces it as its workflow's current run instead of standing beside it. A fork
is a run of its own, started by whoever forked it, under its own budget, linked to its source both
ways (``forked_from`` in its request and status; the ``DeerFlowForkedFrom`` search attribute).

The source's state is read by this run's worker (``read_fork_source``: the source's ``checkpoint``
query, which a worker answers by replaying the source's history), not sent by a client, so no
request can hand a run state it did not earn; it is recorded as that activity's result, so the
fork replays without its source.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import READ_FORK_SOURCE, execute
    from workflows.calls.side_by_side import together
    from workflows.contracts.fork_point import ForkPoint, ForkStage
    from workflows.contracts.status import Phase
    from workflows.research.budget import start_budget
    from workflows.research.coordination import configure
    from workflows.research.findings import finding_preview
    from workflows.research.fork_seed import ForkRefused, ForkSeed, fork_seed
    from workflows.research.research_run import ResearchRun
    from workflows.research.run_state import RunState
    from workflows.research.visibility import FORKED_FROM

INVALID_FORK = "InvalidFork"
NOTE_EDIT_CHARS = 200  # of an edit, quoted in the fork's note (the request and status keep it whole)


async def seed_fork(run: ResearchRun, point: ForkPoint) -> str | None:
    """Adopt the source's results before ``point``; returns the plan feedback a fork from the plan
    starts with (its edit), if any. A point the source never reached fails the run, saying why."""
    source = (await together(configure(run), _read_source(run, point)))[1]
    try:
        seed = fork_seed(source, point)
    except ForkRefused as refused:
        run.state.status.error = f"Cannot fork: {refused}"
        run.state.enter(Phase.FAILED)
        raise ApplicationError(run.state.status.error, type=INVALID_FORK, non_retryable=True) from None
    _adopt(run, point, seed)
    if run.state.config.search_attributes_enabled:
        workflow.upsert_search_attributes([FORKED_FROM.value_set(point.workflow_id)])
    start_budget(run)  # the fork's own, from nothing spent: the source's spending stays the source's
    return seed.feedback


async def _read_source(run: ResearchRun, point: ForkPoint) -> RunState:
    return await execute(READ_FORK_SOURCE, point, RunState, routing=run.routing)


def _adopt(run: ResearchRun, point: ForkPoint, seed: ForkSeed) -> None:
    state = run.state
    state.status.forked_from = point
    state.locale = run.request.locale or seed.locale
    state.planner_messages = seed.planner_messages
    state.observations = seed.observations
    state.plan_iterations = seed.plan_iterations
    if seed.plan is not None:
        state.show_plan(seed.plan, feedback=None)
        for step, shown in zip(seed.plan.steps, state.status.steps, strict=True):
            if step.execution_res is not None:
                shown.finding_preview = finding_preview(step.execution_res)
    state.note(fork_note(point, seed))


def fork_note(point: ForkPoint, seed: ForkSeed) -> str:
    """What the report says at its top about where its research came from (an edit's first words)."""
    source = f"Forked from run {point.workflow_id} at {point.label}"
    edit = _quoted(point.edit) if point.edit else None
    if point.stage is ForkStage.PLAN:
        edited = f", with the edit {edit}" if edit else ""
        return (f"{source}: its coordinator's handoff and background investigation were reused; the plan "
                f"was made again{edited}.")
    reused = f"its plan and the findings of {seed.reused_steps} step(s) were reused, not run again"
    if point.stage is ForkStage.STEP:
        edited = f"; step {point.step} was edited: {edit}" if edit else ""
        return f"{source}: {reused}{edited}."
    asked = f"; the reporter was asked {edit}" if edit else ""
    return f"{source}: {reused}; only the report was written again{asked}."


def _quoted(edit: str) -> str:
    flat = " ".join(edit.split())
    return f"“{flat[:NOTE_EDIT_CHARS]}{'…' if len(flat) > NOTE_EDIT_CHARS else ''}”"
