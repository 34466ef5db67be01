"""Renders a run's status as the short markdown the Web UI shows as its current details."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.models import RunStatus, StepState

STATE_ICON = {StepState.PENDING: "⏳", StepState.RUNNING: "🔄", StepState.DONE: "✅"}
REVIEW_HINT = (
    "Send signal `plan_feedback` with `\"[ACCEPTED]\"` or `\"[EDIT_PLAN] <what to change>\"` "
    "(Web UI: Send a Signal; CLI: `starter.py review ID --accept`)."
)
CLARIFICATION_HINT = "Send signal `clarification_answer` with your answer as a JSON string."


def _readable(timestamp: str | None) -> str:
    if timestamp is None:
        return "none"
    return datetime.fromisoformat(timestamp).strftime("%Y-%m-%d %H:%M UTC")


def current_details(status: RunStatus) -> str:
    lines = [f"**Phase:** {status.phase.value.replace('_', ' ')}"]
    if status.awaiting == "plan_feedback":
        lines.append(f"**Awaiting plan review** (deadline {_readable(status.review_deadline)}). {REVIEW_HINT}")
    elif status.awaiting == "clarification_answer":
        lines.append(f"**Awaiting clarification:** {status.question}\n\n{CLARIFICATION_HINT}")
    if status.plan:
        lines.append(f"\n**Plan:** {status.plan.title} (version {len(status.plan_history)})")
        lines.extend(f"{STATE_ICON[step.state]} {step.index + 1}. {step.title} ({step.step_type.value})"
                     for step in status.steps)
    if status.error:
        lines.append(f"\n**Error:** {status.error}")
    lines.append(f"\nModel calls: {status.usage.llm_calls} · tokens: {status.usage.total_tokens}")
    return "\n".join(lines)
