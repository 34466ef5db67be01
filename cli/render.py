"""Plain-text renderings of plans, run status and reports for the terminal.

Plans, titles and errors are model-written: every rendering goes through ``printable``.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import WorkflowExecutionStatus

from cli.terminal import printable
from runtime.forks import ForkListed
from workflows.contracts.plan import Plan
from workflows.contracts.status import Awaiting, RunStatus
from workflows.research.status_view import (
    Retry,
    awaiting_commands,
    awaiting_headline,
    budget_line,
    decision_lines,
    ignored_lines,
    offline_notice,
    outcome_lines,
    retry_line,
    step_line,
    usage_line,
)

# How a run ended other than by completing. The workflow's own status cannot say it (a cancelled or
# terminated run never ran another line), so it comes from the server and is shown above the phase.
ENDED = {
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "continued as new",
}


def ended_label(state: WorkflowExecutionStatus | None) -> str | None:
    """How a closed run ended ("cancelled", …); None while it runs or once it completed."""
    return ENDED.get(state) if state is not None else None


def state_label(state: WorkflowExecutionStatus | None) -> str:
    """How a run stands, as the server says: ``running``, ``completed`` or how it ended otherwise."""
    return ended_label(state) or (state.name.lower() if state is not None else "unknown")


def plan_text(plan: Plan) -> str:
    lines = [f"Plan: {plan.title}  (locale {plan.locale})"]
    if plan.thought:
        lines.append(f"  Thought: {plan.thought}")
    for index, step in enumerate(plan.steps, start=1):
        search = ", search" if step.need_search else ""
        lines.append(f"  {index}. [{step.step_type.value}{search}] {step.title}")
        if step.description:
            lines.append(f"     {step.description}")
    if plan.has_enough_context:
        lines.append("  (the planner judged the context sufficient: no research steps needed)")
    return printable("\n".join(lines))


def status_text(run_id: str, status: RunStatus, ended: str | None = None, retries: Sequence[Retry] = (),
                forks: Sequence[ForkListed] = ()) -> str:
    """``ended`` (from ``ended_label``) heads the text: a cancelled run's last phase may be awaiting_review.
    ``retries`` are the calls the server is retrying (``cli/retries.py``), shown under the phase;
    ``forks``, the run's forks (runtime/forks.py), after its own source if it is one."""
    if ended is not None and ended != status.phase.value:
        lines = [f"Run {run_id}: {ended}", f"  Last phase: {status.phase.value}"]
    else:
        lines = [f"Run {run_id}: {status.phase.value}"]
    headline = awaiting_headline(status)
    if headline is not None and status.awaiting is not None and ended is None:
        lines.append(f"  Awaiting: {status.awaiting.value}: {headline}")
        lines.extend(f"    {command}" for command in awaiting_commands(status.awaiting, run_id))
    lines.extend(f"  {retry_line(retry, status)}" for retry in retries)
    lines.extend(f"  {line}" for line in fork_lines(status, forks))
    if status.error:
        lines.append(f"  Error: {status.error}")
    lines.extend(f"  {line}" for line in outcome_lines(status))
    if status.plan:
        version = f" (version {len(status.plan_history)})" if status.plan_history else ""
        lines.append(f"  Plan: {status.plan.title}{version}")
    lines.extend(f"  {step_line(step)}" for step in status.steps)
    lines.extend(f"  Decided: {line}" for line in decision_lines(status.decisions))
    lines.extend(f"  Ignored: {line}" for line in ignored_lines(status))
    lines.append(f"  Usage: {usage_line(status.usage)}")
    if status.budget is not None:
        lines.append(f"  Budget: {budget_line(status)}")
    notice = offline_notice(status)
    if notice is not None:
        lines.append(f"  {notice}")
    return printable("\n".join(lines))


def fork_lines(status: RunStatus, forks: Sequence[ForkListed]) -> list[str]:
    """The run's source, if it is a fork, and its own forks: who started each, how it stands."""
    lines = [f"Forked from {status.forked_from.workflow_id} at {status.forked_from.at}"] if status.forked_from else []
    for fork in forks:
        by = f", by {fork.started_by}" if fork.started_by else ""
        lines.append(f"Fork: {fork.workflow_id} at {fork.at or 'an unknown point'} ({fork.status}{by})")
    return lines


def review_help(run_id: str) -> str:
    commands = "".join(f"\n  {command}" for command in awaiting_commands(Awaiting.PLAN_FEEDBACK, run_id))
    return printable(f"To review the plan of run {run_id}:{commands}")
