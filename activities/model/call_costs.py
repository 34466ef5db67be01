"""What one model call costs: its usage priced at the operator's table, and the tokens it counts
against a tokens-per-minute quota before it is sent.

A module of its own because both are arithmetic over settings and a reply, which ``llm.py`` (the
calling and the tool modes) need not carry.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from activities.model.context_budget import count_request_tokens, count_tool_tokens, script_weights_for
from config.settings import Settings
from workflows.contracts.chat import ChatMessage, ChatRequest
from workflows.contracts.usage import Usage, call_usage


def reply_usage(settings: Settings, model: str, reply: AIMessage) -> Usage:
    """The call's tokens as the provider reported them, priced at the operator's price for ``model``."""
    meta: dict[str, Any] = dict(reply.usage_metadata or {})
    cached = int((meta.get("input_token_details") or {}).get("cache_read") or 0)
    return call_usage(model, settings.price_quote(model), int(meta.get("input_tokens", 0)), cached,
                      int(meta.get("output_tokens", 0)), int(meta.get("total_tokens", 0)))


def priced(settings: Settings, model: str, usage: Usage) -> Usage:
    """``usage`` of calls to ``model`` as the probe counts them (tokens only), priced as a turn's call
    is, so the run's cost and its per-model figures include the probe as its tokens do."""
    if not usage.llm_calls:
        return usage
    charged = call_usage(model, settings.price_quote(model), usage.input_tokens, usage.cached_input_tokens,
                         usage.output_tokens, usage.total_tokens)
    charged.llm_calls = charged.by_model[model].llm_calls = usage.llm_calls
    return charged


def quota_tokens_of(settings: Settings, request: ChatRequest, system_prompt: str, messages: list[ChatMessage],
                    tools: list[dict[str, Any]], cap: int) -> int:
    """What a provider counts against its tokens-per-minute quota when the request arrives: the prompt
    and the reply's cap (the reply's real length is known only afterwards). 0 without a quota: no count."""
    if settings.llm_tokens_per_minute is None:
        return 0
    weights = script_weights_for(settings.model_name(request.model_tier.value))
    return count_request_tokens(system_prompt, messages, count_tool_tokens(tools, weights), weights) + cap
