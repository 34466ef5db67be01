"""The ``chat`` activity: one model turn, with its prompt, context budget and output cap.

The turn itself goes through ``langchain_openai.ChatOpenAI`` in ``activities/openai_chat.py``,
which sorts provider errors into retryable and final ones. That module is imported on first use
(``activities/lazy.py``): langchain and the openai SDK take seconds to import.

Every call sends an output cap (``max_tokens``, per agent from settings): a model that loops
stops there, and its reply comes back marked ``truncated`` for the workflow to handle, instead of
running into the request timeout and being retried with the identical request.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from activities.context_budget import (
    count_request_tokens,
    count_tool_tokens,
    fit_to_budget,
    output_reserve,
    token_limit_for,
)
from activities.heartbeat import heartbeating
from activities.lazy import load
from activities.prompts import render_prompt
from config.settings import Settings
from workflows.models import ChatMessage, ChatRequest, ChatResponse
from workflows.plan_parsing import plan_json_schema

SCHEMAS = {"plan": plan_json_schema}


def output_cap(settings: Settings, request: ChatRequest) -> int:
    """The agent's cap from settings, held under the reply's reserve in the context window."""
    window = token_limit_for(settings.model_name(request.model_tier.value), settings.token_limit)
    return min(settings.max_output_tokens(request.prompt), output_reserve(window))


def _response_formats(settings: Settings, request: ChatRequest) -> list[dict[str, Any] | None]:
    """The ``response_format`` values to try, best first: the schema, then plain JSON mode."""
    if not request.json_mode:
        return [None]
    plain = {"type": "json_object"}
    if request.response_schema is None or settings.llm_structured_output != "json_schema":
        return [plain]
    schema = {"name": request.response_schema, "schema": SCHEMAS[request.response_schema](), "strict": False}
    return [{"type": "json_schema", "json_schema": schema}, plain]


def _within_budget(settings: Settings, request: ChatRequest, system_prompt: str,
                   tools: list[dict[str, Any]]) -> list[ChatMessage]:
    """The request's messages trimmed to the model's context window (see ``context_budget``).

    Trimming happens here, not in the workflow, so history keeps every tool output in full and
    a change of model or ``TOKEN_LIMIT`` applies to the next turn of a running workflow.
    """
    model = settings.model_name(request.model_tier.value)
    limit = token_limit_for(model, settings.token_limit)
    reserve = output_reserve(limit)
    tools_tokens = count_tool_tokens(tools)
    messages = fit_to_budget(system_prompt, request.messages, tools_tokens, limit, reserve)
    if messages != request.messages:
        activity.logger.info(
            "Trimmed the %s prompt from ~%d to ~%d estimated tokens (%d of %d messages kept) to fit "
            "%s's %d-token window with %d tokens reserved for the reply",
            request.prompt, count_request_tokens(system_prompt, request.messages, tools_tokens),
            count_request_tokens(system_prompt, messages, tools_tokens), len(messages), len(request.messages),
            model, limit, reserve,
        )
    return messages


class ModelActivities:
    """The model turn, built with the worker's settings (endpoint, key, model names, limits)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name="chat")
    @heartbeating
    async def chat(self, request: ChatRequest) -> ChatResponse:
        settings = self.settings
        system_prompt = render_prompt(request.prompt, request.prompt_vars)
        tools = [{"type": "function", "function": spec.model_dump()} for spec in request.tools]
        messages = _within_budget(settings, request, system_prompt, tools)
        openai_chat = await load("activities.openai_chat")  # on the first turn, not at worker start
        return await openai_chat.complete(settings, request, system_prompt, messages, tools,
                                          _response_formats(settings, request), output_cap(settings, request))
