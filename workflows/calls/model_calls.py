"""The one way workflow code calls the model: the ``chat`` activity, with its options from the table."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from workflows.calls.activity_options import CHAT, execute
    from workflows.calls.queues import OWN_QUEUES, QueueRouting
    from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse
    from workflows.contracts.usage import Usage, UsageSink


async def chat(request: ChatRequest, usage: UsageSink, summary: str | None = None, *,
               routing: QueueRouting) -> ChatResponse:
    """Run one model turn and add its token usage to ``usage``; the whole response, for callers
    that handle a reply cut at its output cap (``truncated``).

    A turn that failed after real calls (a provider that does not call tools: the reply and the
    probe) carries their usage in its failure's details, and that is added too: a failed run's
    usage says what it spent.

    ``summary`` is the turn's line in the timeline (e.g. "researcher · step 2 · turn 3"); without
    it the line is the prompt's name.
    """
    try:
        response = await execute(CHAT, request, ChatResponse, routing=routing, summary=summary)
    except ActivityError as error:
        usage.add(spent_before(error))
        raise
    usage.add(response.usage)
    return response


def spent_before(error: ActivityError) -> Usage:
    """The usage a failed ``chat`` reported in its details (none: nothing was spent, or not said)."""
    cause = error.cause
    if not isinstance(cause, ApplicationError) or not cause.details:
        return Usage()
    try:
        return Usage.model_validate(cause.details[0])
    except ValidationError:
        return Usage()


async def call_model(request: ChatRequest, usage: UsageSink, summary: str | None = None, *,
                     routing: QueueRouting) -> ChatMessage:
    """Run one model turn (see :func:`chat`) and return its message."""
    return (await chat(request, usage, summary, routing=routing)).message


async def ask(prompt: str, content: str, usage: Usage, summary: str, prompt_vars: dict[str, str] | None = None,
              ) -> str:
    """One tool-less turn of the content flows: prompt ``prompt``, one user message, the reply's text.
    The content flows have no run config, so the turn goes to the model's own queue."""
    request = ChatRequest(prompt=prompt, prompt_vars=prompt_vars or {},
                          messages=[ChatMessage(role="user", content=content)])
    return (await chat(request, usage, summary, routing=OWN_QUEUES)).message.content
