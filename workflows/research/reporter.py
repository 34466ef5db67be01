"""The reporter's turn: the report, with what a reader must know about it at its top."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.calls.model_calls import chat
    from workflows.contracts.chat import ChatMessage, ChatRequest
    from workflows.contracts.fork_point import ForkStage
    from workflows.contracts.status import Phase
    from workflows.research.messages import reporter_messages
    from workflows.research.research_run import ResearchRun
    from workflows.research.status_view import budget_line

ZERO_FINDINGS_NOTE = ("This report was written with zero research findings: it rests on the model's "
                      "own knowledge only.")


async def write_report(run: ResearchRun) -> str:
    """The reporter's text, with what a reader must know about it at its top (no research
    needed, zero findings) and a mark where it was cut at the output cap."""
    state = run.state
    state.enter(Phase.REPORTING)
    if not any(observation.strip() for observation in state.observations):
        state.note(ZERO_FINDINGS_NOTE)
    response = await chat(
        ChatRequest(
            prompt="reporter",
            prompt_vars={**run.prompt_vars(state.report_locale), "report_style": run.request.report_style.value},
            messages=reporter_messages(run.current_plan(), state.observations) + _fork_instruction(run),
        ),
        state.status.usage,
        summary="reporter",
        routing=run.routing,
    )
    report = "".join(f"> **Note:** {note}\n\n" for note in state.status.notes) + response.message.content
    if response.truncated:
        cut = (f"The report was cut at the reporter's output cap of {response.output_cap} tokens "
               "(LLM_AGENT_MAX_OUTPUT_TOKENS, reporter=…).")
        state.note(cut)
        report += f"\n\n> **Note:** {cut}"
    return report + budget_footer(run)


def _fork_instruction(run: ResearchRun) -> list[ChatMessage]:
    """A fork from the report with an edit: the person's instruction to the reporter, after the findings."""
    point = run.request.forked_from
    if point is None or point.stage is not ForkStage.REPORT or point.edit is None:
        return []
    return [ChatMessage(role="user", name="feedback", content=f"When writing the report: {point.edit}")]


def budget_footer(run: ResearchRun) -> str:
    """The report's last line, for a run with a budget: what it spent of it (the reporter's turn
    included), and whether the research was cut short at it."""
    status = run.state.view()
    if status.budget is None:
        return ""
    ending = (": the report is written from what was found" if status.budget.cut_short
              else "; the research was not cut short")
    return f"\n\n---\n*Budget: {budget_line(status)}{ending}.*\n"
