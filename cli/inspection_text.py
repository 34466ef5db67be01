"""``starter.py inspect`` on a terminal: a run's stages, calls, waits and messages as plain lines.

Every string of the inspection is the run's (model replies, pages, people's messages): it goes
through :func:`cli.terminal.printable`, so no control sequence reaches the terminal. Long parts
are cut at ``limit`` characters, saying how much is left; ``--full`` shows them whole. The headings
are shared with the HTML page (cli/inspection_html.py), which escapes them instead.
"""

from __future__ import annotations

from datetime import datetime

from cli.terminal import printable
from runtime.inspection_model import Call, Message, Part, RunInspection, Stage, Wait

PART_LIMIT = 1500  # characters of each part shown without --full


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC" if moment else "-"


def seconds(value: float | None) -> str:
    if value is None:
        return "still open"
    return f"{value:.2f} s" if value < 120 else f"{value / 60:.1f} min"


def usd(amount: float) -> str:
    return f"${amount:,.4f}"


def run_lines(inspection: RunInspection) -> list[str]:
    """The run's heading: what, where from, how it ended, when, and what it spent."""
    runs = f" · {len(inspection.run_ids)} runs (continued as new)" if len(inspection.run_ids) > 1 else ""
    lines = [f"Run {inspection.workflow_id} · {inspection.workflow_type} · {inspection.status}{runs}",
             f"Read from {inspection.source}",
             f"Started {when(inspection.started_at)} · closed {when(inspection.closed_at)}",
             f"Tokens: {inspection.input_tokens:,} in · {inspection.output_tokens:,} out · "
             f"{usd(inspection.cost_usd)} (priced models only)"]
    if inspection.unpriced_models:
        lines.append(f"No price for {', '.join(inspection.unpriced_models)}: its tokens count, its cost does not")
    if inspection.forked_from is not None:
        lines.append(f"Forked from {inspection.forked_from.workflow_id} at {inspection.forked_from.at}")
    lines += [f"Forked as {fork.workflow_id} at {fork.at}" for fork in inspection.forks]
    return lines


def stage_line(stage: Stage) -> str:
    tokens = f" · {stage.input_tokens:,} in / {stage.output_tokens:,} out tokens" if stage.input_tokens else ""
    cost = f" · {usd(stage.cost_usd)}" if stage.cost_usd else ""
    return f"{stage.title} · {when(stage.started_at)} · {seconds(stage.duration_seconds)}{tokens}{cost}"


def call_line(call: Call) -> str:
    """One call's facts: kind, event, state, duration, attempts, worker, tokens and cost."""
    facts = [call.activity, f"event {call.event_id}", call.state.replace("_", " "),
             f"started {when(call.started_at)}" if call.started_at else "not started",
             seconds(call.duration_seconds) if call.closed_at else "in flight",
             f"{call.attempts} attempts" if call.attempts > 1 else ""]
    if call.worker:
        facts.append(f"on {call.worker}")
    if call.usage is not None:
        cost = usd(call.usage.cost_usd) if call.usage.priced else "unpriced"
        facts.append(f"{call.usage.model or 'model'}: {call.usage.input_tokens:,} in / "
                     f"{call.usage.output_tokens:,} out tokens · {cost}")
    return " · ".join(fact for fact in facts if fact)


def wait_line(wait: Wait) -> str:
    ended = f"{wait.ended} at {when(wait.ended_at)}" if wait.ended_at else "still waiting"
    return f"waited for a person ({wait.title}, until {when(wait.deadline)}): {ended}"


def message_line(message: Message) -> str:
    outcome = f" → {message.outcome}" if message.outcome else ""
    return f"{when(message.at)} · {message.kind} from {message.by} (run {message.run}, event {message.event_id}): " \
           f"{message.text}{outcome}"


def render(inspection: RunInspection, limit: int | None = PART_LIMIT) -> str:
    """The whole inspection as text for a terminal, every string printable."""
    lines = list(run_lines(inspection))
    lines += [f"Problem: {problem}" for problem in inspection.problems]
    lines += ["", "Request", *_parts(inspection.request, limit, "  ")]
    for stage in inspection.stages:
        lines += ["", f"== {stage_line(stage)}"]
        lines += [f"  ⏸ {wait_line(wait)}" for wait in stage.waits]
        lines += [f"  ✉ {message_line(message)}" for message in stage.messages]
        for call in stage.calls:
            lines += [f"  ▸ {call.title}", f"    {call_line(call)}"]
            lines += [f"    attempt {failure.attempt} failed: {failure.message}" for failure in call.failures]
            lines += _section("input", call.input, limit) + _section("output", call.output, limit)
    staged = {id(message) for stage in inspection.stages for message in stage.messages}
    unstaged = [message for message in inspection.messages if id(message) not in staged]
    if unstaged:
        lines += ["", "== Messages", *[f"  ✉ {message_line(message)}" for message in unstaged]]
    lines += ["", "Result", *_parts(inspection.result, limit, "  ")]
    return printable("\n".join(lines))


def _section(title: str, parts: list[Part], limit: int | None) -> list[str]:
    return [f"    {title}:", *_parts(parts, limit, "      ")] if parts else []


def _parts(parts: list[Part], limit: int | None, indent: str) -> list[str]:
    """Each part as its label, then its text indented under it."""
    lines: list[str] = []
    for part in parts:
        text = part.text
        if limit is not None and len(text) > limit:
            text = f"{text[:limit]}\n… {len(text) - limit:,} more characters (--full shows them)"
        lines.append(f"{indent}[{part.label}]")
        lines += [f"{indent}  {line}" for line in text.split("\n")]
    return lines
