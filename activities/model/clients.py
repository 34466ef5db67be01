"""The model's ``ChatOpenAI`` clients: how one is built, which reply it guards against, and how a
worker warms them.

Why a module of its own: what a client costs (about 3 ms of CPU to build, 370 ms for a process's
first) is a concern of its own, measured in bench/overhead.py.

The model turn (``activities/model/llm.py``) keeps its clients (:class:`KeptClients`): a turn
built two (the probe's, whose key says which verdict applies, and the one it asks with), and each
build re-read the proxy environment, built openai's clients and serialized the model for
langchain's callbacks, about 3 ms of a warm turn before its request left. The turn's in-flight
heartbeat (``activities/model/chat.py``) had that much of a head start over the request; it is sent,
not awaited, so its order was never guaranteed, and a Temporal server killed between the two
still cannot count the call it then runs again (docs/models.md).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import httpx
import openai
from langchain_core.outputs import ChatResult
from langchain_openai.chat_models.base import ChatOpenAI  # not the package: runtime/deferred_init.py

from activities.model import reply_calls
from activities.model.tool_support import PROBE_MAX_TOKENS
from activities.support.kept import kept
from config.settings import Settings
from workflows.contracts.chat import ModelTier


class GuardedChatOpenAI(ChatOpenAI):
    """``ChatOpenAI`` that leaves a reply's tool calls unread, as the provider sent them, for the one
    parser of whole and streamed replies (``reply_calls.py``). langchain's own reading failed the turn
    on arguments that are JSON but not an object (its ``AIMessage`` refuses them, on every retry)."""

    def _create_chat_result(self, response: Any, generation_info: dict[str, Any] | None = None) -> ChatResult:
        if not isinstance(response, dict | openai.BaseModel):  # an HTML error page: langchain says so
            return super()._create_chat_result(response, generation_info)
        data = response if isinstance(response, dict) else response.model_dump(warnings=False)
        calls = [reply_calls.from_provider(choice.get("message") or {}) for choice in data.get("choices") or []]
        result = super()._create_chat_result(data, generation_info)
        for generation, raw in zip(result.generations, calls, strict=False):
            reply_calls.with_calls(generation.message, raw)  # type: ignore[arg-type]
        return result


@functools.cache
def _unverified_client(timeout: float) -> httpx.AsyncClient:
    """One shared client per timeout, as langchain-openai caches its default ones: a client per call
    would leave its connections open until garbage collection."""
    return httpx.AsyncClient(verify=False, timeout=timeout)


def build_client(settings: Settings, tier: str, max_tokens: int) -> ChatOpenAI:
    endpoint = settings.model_endpoint(tier)
    # verify_ssl: false (DeerFlow's, for a self-signed endpoint) needs a client of our own.
    insecure = {} if endpoint.verify_ssl else {"http_async_client": _unverified_client(settings.llm_request_timeout)}
    return GuardedChatOpenAI(
        model=settings.model_name(tier),
        base_url=endpoint.base_url,
        api_key=endpoint.api_key or "offline",
        max_retries=endpoint.max_retries,
        timeout=settings.llm_request_timeout,
        stream_usage=True,
        max_tokens=max_tokens,
        **insecure,
    )


class KeptClients:
    """A worker's built clients, one per tier and output cap, built on first use and kept.

    A client holds no state of a call (langchain binds tools and the response format onto a
    wrapper, and the SDK's HTTP clients are shared anyway), so one serves every turn and every
    concurrent one. The caps a worker sees are few (per prompt, under the context window), but a
    learned window can add more: past ``limit`` the oldest is dropped.
    """

    def __init__(self, settings: Settings, limit: int = 32) -> None:
        self.settings = settings
        self.limit = limit
        self._built: dict[tuple[str, int], ChatOpenAI] = {}

    def get(self, tier: str, max_tokens: int) -> ChatOpenAI:
        return kept(self._built, (tier, max_tokens), functools.partial(build_client, self.settings, tier, max_tokens),
                    self.limit)


# Imported on a first call's way out: httpx's transport imports httpcore, and anyio its event loop's
# backend, on first use (the context window's request to the provider is the first of both).
FIRST_CALL_IMPORTS = ("httpcore", "anyio._backends._asyncio")


def warm(settings: Settings) -> None:
    """Pay, at worker start, what a worker's first model call would otherwise pay on a run's critical
    path: about 370 ms of CPU here, for 12 ms of a later call (a new worker's first run started that
    much later than its second, bench/overhead.py). Building a client of each tier imports the
    openai SDK's chat resources (lazily imported on first use) and builds langchain's shared HTTP
    clients for the endpoint, loading the CA bundle for each; the imports of
    :data:`FIRST_CALL_IMPORTS` are the rest (and ``activities.support.tls.warm``, which the worker's
    preload calls too). Nothing is sent: no provider is asked anything."""
    for module in FIRST_CALL_IMPORTS:
        importlib.import_module(module)
    for tier in ModelTier:
        build_client(settings, tier.value, PROBE_MAX_TOKENS)
