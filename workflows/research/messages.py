"""Builds the messages each agent reads, in DeerFlow's layouts.

Kept apart from the workflow so the layouts can be read (and tested) in one place.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.chat import ChatMessage
    from workflows.contracts.plan import Plan, Step
    from workflows.contracts.tool_activities import SearchResponse
    from workflows.research.document_names import document_name
    from workflows.research.search_format import search_results_json

REPORT_FORMAT_REMINDER = (
    "IMPORTANT: Structure your report according to the format in the prompt: Key Points, Overview, "
    "Detailed Analysis, Survey Note (optional) and Key Citations. Put all citations in Key Citations "
    "as `- [Source Title](URL)`, with an empty line between them, and no inline citations. "
    "PRIORITIZE MARKDOWN TABLES for comparisons, statistics, features and options."
)


# How the planner's task marks each question the coordinator asked between the person's words
# (the offline planner reads the layout back, to tell the question from the answers).
ASKED = "(Assistant asked: {})"


def clarified_task(conversation: list[ChatMessage]) -> ChatMessage:
    """The planner's task after clarifying questions: the whole exchange, the person's words as
    they were and each question asked in :data:`ASKED`'s parentheses."""
    return ChatMessage(role="user", content="\n\n".join(
        message.content if message.role == "user" else ASKED.format(message.content) for message in conversation
    ))


# The name of the planner's message holding the background investigation's results (read back by
# workflows/research/found_urls.py: background_urls, and by the offline planner).
BACKGROUND_INVESTIGATION = "background_investigation"


def background_message(response: SearchResponse) -> ChatMessage:
    return ChatMessage(
        role="user",
        name=BACKGROUND_INVESTIGATION,
        content=f"background investigation results of user query:\n{search_results_json(response)}",
    )


def observation_message(observation: str) -> ChatMessage:
    return ChatMessage(
        role="user", name="observation",
        content=f"Below are some observations for the research task:\n\n{observation}",
    )


def step_task(plan: Plan, step: Step, locale: str, context: set[int] | None = None,
              resources: list[str] | None = None) -> str:
    """The step input of DeerFlow's researcher and coder: topic, earlier findings, current step.

    ``context`` limits the earlier findings to those steps (a parallel step sees only what it
    depends on, so its input does not depend on which sibling happened to finish first).
    """
    parts = [f"# Research Topic\n\n{plan.title}\n\n"]
    completed = [done for index, done in enumerate(plan.steps)
                 if done.execution_res is not None and (context is None or index in context)]
    if completed:
        parts.append("# Completed Steps\n\n")
        for index, done in enumerate(completed, start=1):
            parts.append(f"## Completed Step {index}: {done.title}\n\n<finding>\n{done.execution_res}\n</finding>\n\n")
    parts.append(
        f"# Current Step\n\n## Title\n\n{step.title}\n\n## Description\n\n{step.description}\n\n"
        f"## Locale\n\n{locale}"
    )
    if resources:
        # By name: the model needs no path (local_search_tool searches them all) and wrote it into titles.
        listed = "\n".join(f"- {document_name(resource)}" for resource in resources)
        parts.append(f"\n\n**The user provided these documents:**\n\n{listed}\n\n"
                     "You MUST search them with `local_search_tool` before using the web.")
    return "".join(parts)


def reporter_messages(plan: Plan, observations: list[str]) -> list[ChatMessage]:
    return [
        ChatMessage(role="user", content=f"# Research Requirements\n\n## Task\n\n{plan.title}\n\n"
                                         f"## Description\n\n{plan.thought}"),
        ChatMessage(role="user", name="system", content=REPORT_FORMAT_REMINDER),
        *(observation_message(observation) for observation in observations),
    ]
