"""Renders a run's status as the short markdown the Web UI shows as its current details."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.status import RunStatus
    from workflows.research.status_view import (
        awaiting_commands,
        awaiting_headline,
        budget_line,
        decision_lines,
        ignored_lines,
        offline_notice,
        outcome_lines,
        phase_label,
        step_line,
        usage_line,
    )


def current_details(status: RunStatus) -> str:
    lines = [f"**Phase:** {phase_label(status.phase)}"]
    notice = offline_notice(status)
    if notice is not None:
        lines.append(f"*{notice}*")
    headline = awaiting_headline(status)
    if headline is not None:
        lines.append(f"**{headline}**")
        lines.extend(f"- `{command}`" for command in awaiting_commands(status.awaiting))
    if status.plan:
        no_research = " · no research needed" if status.plan.has_enough_context else ""
        lines.append(f"\n**Plan:** {status.plan.title} (version {len(status.plan_history)}){no_research}")
        lines.extend(step_line(step) for step in status.steps)
    if status.error:
        lines.append(f"\n**Error:** {status.error}")
    lines.extend(f"\n**{line}**" for line in outcome_lines(status))
    if status.decisions:
        lines.append("\n**Decided:**")
        lines.extend(f"- {line}" for line in decision_lines(status.decisions))
    ignored = ignored_lines(status)
    if ignored:
        lines.append("\n**Ignored signals:**")
        lines.extend(f"- {line}" for line in ignored)
    lines.append(f"\n**Usage:** {usage_line(status.usage)}")
    if status.budget is not None:
        lines.append(f"**Budget:** {budget_line(status)}")
    return "\n".join(lines)
