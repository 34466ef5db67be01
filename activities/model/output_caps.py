"""Each agent's output cap: the ``max_tokens`` a turn asks for, from the operator's settings and the
model's context window. A module of its own, without the model clients, because the run's config
(``load_run_config``: the reporter's reserve) needs the reporter's cap before any model call, and the
worker starts without the client libraries (tests/test_worker_startup.py)."""

from __future__ import annotations

from activities.model.context_budget import output_reserve, token_limit_for
from config.settings import Settings
from workflows.contracts.chat import ChatRequest


def output_cap(settings: Settings, request: ChatRequest, window: int | None = None) -> int:
    """The agent's cap from settings, held under the reply's reserve in the context window
    (``window``, else the one settings and the model's name give)."""
    window = window or token_limit_for(settings.model_name(request.model_tier.value), settings.token_limit)
    return min(settings.max_output_tokens(request.prompt), output_reserve(window))


def output_caps(settings: Settings, window: int) -> set[int]:
    """Every cap :func:`output_cap` gives under ``window``: the default agent's and each configured one's."""
    return {min(cap, output_reserve(window))
            for cap in (settings.llm_max_output_tokens, *settings.llm_agent_max_output_tokens.values())}
