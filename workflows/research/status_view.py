"""What a run's status says to a person, written once for its three readers.

The Web UI's current details (``workflows/research/progress.py``, markdown, set by the workflow), ``starter.py
status`` (``cli/render.py``, plain text) and ``starter.py watch`` (``cli/watch.py``, a live panel or
change lines) each lay the run out their own way, but the words come from here: the phase, what the
run awaits and how to send it, step lines, usage, events and the signals it ignored. So a new
awaited message or event kind is explained in one place.

Pure and deterministic (it runs inside the workflow sandbox): times are formatted by the caller's
``when`` function, UTC by default. Terminal safety (``cli/terminal.py``) stays at the CLI's edge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from workflows.contracts.budget import tokens_text, usd
from workflows.contracts.decisions import Decision, cancelled_by
from workflows.contracts.research import Outcome
from workflows.contracts.status import Awaiting, Phase, ProgressEvent, RunStatus, StepState, StepStatus
from workflows.contracts.usage import Usage

STEP_MARK = {StepState.PENDING: "·", StepState.RUNNING: "▶", StepState.DONE: "✓"}
RECENT_IGNORED = 3  # ignored signals shown in a status summary; ``watch`` shows every event
RETRY_ERROR_CHARS = 200  # the last error's share of a retry line
# Said wherever a run's words leave the terminal (Web UI details, saved reports): the offline
# demonstration model and corpus wrote it, so nobody takes it for research.
OFFLINE_NOTICE = ("Written by the OFFLINE DEMONSTRATION MODEL with its small bundled corpus (no OPENAI_API_KEY "
                  "on the worker): a demonstration, not research.")
# The same for a run with only one bundled provider (a real model with no search key, or the reverse).
OFFLINE_MODEL_NOTICE = ("Written by the OFFLINE DEMONSTRATION MODEL (no OPENAI_API_KEY on the worker), from real "
                        "searches: a demonstration, not research.")
OFFLINE_SEARCH_NOTICE = ("Researched in the small BUNDLED OFFLINE SEARCH CORPUS, not the web (no TAVILY_API_KEY on "
                         "the worker), though by a real model: not web research.")
OFFLINE_LABEL = {("model", "search"): "offline demonstration model", ("model",): "offline demonstration model",
                 ("search",): "offline search corpus"}


OUTCOME_LABEL = {
    Outcome.REPORT: "research report",
    Outcome.DIRECT_REPLY: "direct reply (no research was done)",
    Outcome.FAILED: "failed",
    Outcome.CANCELLED: "cancelled",
}


def outcome_lines(status: RunStatus) -> list[str]:
    """How the run ended and what a reader must know about it (notes), so a direct reply or a
    report from nothing is never taken for research."""
    lines = [f"Outcome: {OUTCOME_LABEL[status.outcome]}"] if status.outcome is not None else []
    return lines + [f"Note: {note}" for note in status.notes]


def _offline(status: RunStatus) -> tuple[str, ...]:
    """The bundled providers that served the run; a run from before the list existed: both."""
    if not status.offline_demo:
        return ()
    return tuple(sorted(status.offline_providers)) or ("model", "search")


def offline_notice(status: RunStatus) -> str | None:
    """What a saved report and the run's details must say when a bundled offline provider served
    the run, so that nobody takes it for research; None when every provider was real."""
    return {("model", "search"): OFFLINE_NOTICE, ("model",): OFFLINE_MODEL_NOTICE,
            ("search",): OFFLINE_SEARCH_NOTICE}.get(_offline(status))


def offline_label(status: RunStatus) -> str | None:
    """The same, in a few words (``watch``'s subtitle)."""
    return OFFLINE_LABEL.get(_offline(status))


def utc_time(timestamp: str) -> str:
    return datetime.fromisoformat(timestamp).strftime("%Y-%m-%d %H:%M UTC")


DECISION_LABEL = {"plan_review": "plan review", "clarification": "clarification", "cancel": "cancel",
                  "budget": "budget"}


def decision_lines(decisions: list[Decision], when: Callable[[str], str] = utc_time) -> list[str]:
    """Who decided what, and when: ``2025-01-02 10:00 UTC plan review: [ACCEPTED] by alice (cli)``."""
    return [f"{when(decision.at)} {DECISION_LABEL[decision.kind]}: {decision.decision} by {decision.by}"
            for decision in decisions]


def why_cancelled(status: RunStatus) -> str | None:
    """Why a cancelled run ended, in words: who cancelled it (a cancel, or "cancel" at its budget), or
    the run's own reason (a review or budget decision not given in time); None: the status does not say."""
    for decision in reversed(status.decisions):
        if decision.kind == "cancel":
            return cancelled_by(decision.by)
        if decision.kind == "budget" and decision.decision == "cancel":
            return f"Cancelled at its budget by {decision.by}."
    return next((note for note in reversed(status.notes) if "cancelled" in note), None)


def phase_label(phase: Phase) -> str:
    return phase.value.replace("_", " ")


def awaiting_headline(status: RunStatus, when: Callable[[str], str] = utc_time) -> str | None:
    """What the run waits for, in words, with the deadline or question; None when it waits for nobody."""
    match status.awaiting:
        case Awaiting.PLAN_FEEDBACK:
            deadline = f" (until {when(status.review_deadline)})" if status.review_deadline else ""
            return f"Awaiting plan review{deadline}"
        case Awaiting.CLARIFICATION:
            return f"Awaiting an answer: {status.question or ''}"
        case Awaiting.BUDGET:
            return f"Awaiting a budget decision: {budget_line(status)}{expected_line(status)}"
        case None:
            return None


def awaiting_commands(awaiting: Awaiting | None, run_id: str = "ID") -> list[str]:
    """The ways to send what the run awaits, one per line."""
    match awaiting:
        case Awaiting.PLAN_FEEDBACK:
            return [f"python starter.py review {run_id} --accept",
                    f'python starter.py review {run_id} --edit "what to change"',
                    f"temporal workflow signal --workflow-id {run_id} --name {awaiting.value} "
                    "--input '\"[ACCEPTED]\"'",
                    f"Web UI: Send a Signal, name {awaiting.value}, input \"[ACCEPTED]\" "
                    "or \"[EDIT_PLAN] <what to change>\""]
        case Awaiting.CLARIFICATION:
            return [f'python starter.py answer {run_id} "your answer"',
                    f"temporal workflow signal --workflow-id {run_id} --name {awaiting.value} "
                    "--input '\"your answer\"'"]
        case Awaiting.BUDGET:
            return [f"python starter.py budget {run_id} --raise TOKENS [--raise-usd USD]",
                    f"python starter.py budget {run_id} --finish",
                    f"python starter.py budget {run_id} --cancel",
                    f"temporal workflow update execute --workflow-id {run_id} --name decide_budget "
                    """--input '{"action": "finish"}'""",
                    f"temporal workflow signal --workflow-id {run_id} --name {awaiting.value} "
                    """--input '{"action": "finish"}'"""]
        case None:
            return []


def step_line(step: StepStatus) -> str:
    return f"{STEP_MARK[step.state]} {step.index + 1}. {step.title} ({step.step_type.value})"


def budget_line(status: RunStatus) -> str:
    """Spent and remaining of the run's budgets: ``12,000 of 50,000 tokens spent, 38,000 left; $0.0120
    of $0.0500 spent, $0.0380 left``, and whether the research was cut short at them."""
    budget, standing = status.budget, status.budget_standing
    if budget is None or standing is None:
        return f"no budget ({status.usage.total_tokens:,} tokens, {usd(status.usage.cost_usd)} spent)"
    parts = [f"{standing.spent_tokens:,} of {tokens_text(budget.tokens)} tokens spent, "
             f"{tokens_text(standing.remaining_tokens or 0)} left"
             if budget.tokens is not None else f"{standing.spent_tokens:,} tokens spent (no token budget)",
             f"{usd(standing.spent_usd)} of {usd(budget.cost_usd)} spent, {usd(standing.remaining_usd or 0)} left"
             if budget.cost_usd is not None else f"{usd(standing.spent_usd)} spent (no cost budget)"]
    cut = " (cut short)" if budget.cut_short else ""
    return "; ".join(parts) + cut + _unpriced(standing.unpriced_models)


def spent_line(status: RunStatus) -> str:
    """``7 model calls, 15,456 tokens``, and the budgets' standing where the run has them."""
    budget = f"; budget: {budget_line(status)}" if status.budget is not None else ""
    return f"{status.usage.llm_calls} model calls, {status.usage.total_tokens:,} tokens{budget}"


def expected_line(status: RunStatus) -> str:
    """While paused at the budget: what the next step, the rest of the plan and finishing now are
    expected to cost, as clauses after the budget's line."""
    return "".join(f"; {clause}" for clause in budget_forecast(status))


def budget_forecast(status: RunStatus) -> list[str]:
    """While paused at the budget, one clause each (lower case, no full stop; our page shows them as
    sentences): what the next step and the rest of the plan are expected to cost, and what finishing
    now costs. Before any step has finished there is no step to take the mean of, so the run knows
    no step's cost (it said "0 tokens ($0.0000)"); with no priced model there is no price to say."""
    budget, standing = status.budget, status.budget_standing
    if budget is None or budget.expected_next_step is None:
        return []
    priced = standing is None or not standing.unpriced_models or standing.spent_usd > 0

    def price(amount: float | None) -> str:
        return f" ({usd(amount or 0.0)})" if priced else ""

    if not budget.step_tokens:
        clauses = ["no step has finished yet, so what a step costs is not known"]
    else:
        clauses = [f"the next step is expected to cost {budget.expected_next_step:,} tokens"
                   f"{price(budget.expected_next_step_usd)}, the rest of the plan {budget.expected_rest or 0:,} "
                   f"tokens{price(budget.expected_rest_usd)}"]
    if standing is not None and budget.expected_report is not None:
        report_usd = budget.expected_report_usd or 0.0
        over = ((standing.remaining_tokens is not None and budget.expected_report > standing.remaining_tokens)
                or (standing.remaining_usd is not None and report_usd > standing.remaining_usd))
        clauses.append(f"finishing now, the report is expected to cost at most {tokens_text(budget.expected_report)} "
                       f"tokens{price(report_usd)}" + (", more than the budget has left: it would go over" if over
                                                        else ""))
    return clauses


def _unpriced(models: list[str]) -> str:
    return (f" [no price for {', '.join(models)}: its tokens count, its cost does not]") if models else ""


def usage_line(usage: Usage) -> str:
    """Calls (those made in JSON tool mode), tokens and cost, with the price each model was charged at
    and where it came from."""
    prices = "; ".join(f"{model} at {model_usage.price}" for model, model_usage in usage.by_model.items()
                       if model_usage.price is not None)
    json_mode = f" ({usage.json_tool_calls} in JSON tool mode)" if usage.json_tool_calls else ""
    return (f"{usage.llm_calls} model calls{json_mode} · {usage.total_tokens:,} tokens "
            f"(in {usage.input_tokens:,}, cached {usage.cached_input_tokens:,}, out {usage.output_tokens:,})"
            f" · {usd(usage.cost_usd)}" + (f" ({prices})" if prices else "") + _unpriced(usage.unpriced_models))


def event_text(event: ProgressEvent) -> str:
    """One event as a person reads it, without the time: ``phase → researching``, ``step 2 done: …``."""
    step = f"step {event.step_index + 1}" if event.step_index is not None else "step"
    match event.kind:
        case "phase":
            return f"phase → {event.message}"
        case "step_started":
            return f"{step} started: {event.message}"
        case "step_done":
            return f"{step} done: {event.message}"
        case "ignored":
            return f"ignored signal {event.message}"
        case _:
            return f"{event.kind}: {event.message}"


def ignored_lines(status: RunStatus) -> list[str]:
    """The latest signals the run dropped, and why: their sender sees nothing else."""
    ignored = [event for event in status.events if event.kind == "ignored"]
    return [f"{utc_time(event.at)} {event_text(event)}" for event in ignored[-RECENT_IGNORED:]]


@dataclass(frozen=True)
class Retry:
    """An activity the server is retrying, as ``describe()`` lists it among the pending activities.

    Not part of the status: the workflow never sees an attempt fail (only the final outcome), so a
    client reads this from the server and shows it next to the status.
    """

    call: str  # the activity type: chat, web_search, crawl, …
    attempt: int  # the attempt now running or waiting (2 after the first failure)
    maximum_attempts: int  # 0: unlimited
    last_error: str


def retry_line(retry: Retry, status: RunStatus | None = None) -> str:
    """One line: which call (and where the run is), which attempt, the last error."""
    where = ""
    if status is not None:
        running = [step.index + 1 for step in status.steps if step.state is StepState.RUNNING]
        steps = f" (step {', '.join(map(str, running))})" if running and status.phase is Phase.RESEARCHING else ""
        where = f" while {phase_label(status.phase)}{steps}"
    of = f" of {retry.maximum_attempts}" if retry.maximum_attempts else ""
    error = " ".join(retry.last_error.split())
    if len(error) > RETRY_ERROR_CHARS:
        error = error[:RETRY_ERROR_CHARS - 1] + "…"
    return f"Retrying {retry.call}{where}: attempt {retry.attempt}{of}, last error: {error}"
