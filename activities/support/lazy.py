"""Heavy activity code imported on first use, off the event loop, instead of at worker start.

langchain, the openai SDK and the MCP SDK take seconds to import (``python -X importtime
worker.py``). A worker that replaces a dead one must poll at once, since the front door and the
crashed runs wait for it; so the activities that need them import them here, in a thread, where
the event loop (polls, heartbeats, other activities) keeps running. ``preload`` does the same
right after the worker starts polling, so the first call rarely waits.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Collection
from types import ModuleType

from activities.support import tls
from config.settings import Settings

# Every module an activity imports through ``load``.
MODEL_MODULE = "activities.model.llm"
MCP_MODULE = "activities.mcp.tools"
CLIENTS_MODULE = "activities.model.clients"  # imported with the model module
# Imported by the first search (activities/web/search.py), which registers them; preloaded here.
SEARCH_PROVIDERS_MODULE = "activities.web.search_providers"
# The queues whose worker runs the model turn: the main queue keeps every activity.
MODEL_KINDS = frozenset({"main", "model"})
_log = logging.getLogger(__name__)


async def load(name: str) -> ModuleType:
    """The module ``name``, imported in a thread if it is not yet (the import lock makes a
    concurrent second import wait for the first, never run twice)."""
    return await asyncio.to_thread(importlib.import_module, name)


def _warm_first_calls(settings: Settings, model: bool) -> None:
    tls.warm()  # the model calls' and the crawler's contexts: each loads the CA bundle
    if model:
        importlib.import_module(CLIENTS_MODULE).warm(settings)


async def preload(settings: Settings, kinds: Collection[str]) -> None:
    """Warm what the activities of the queue ``kinds`` served here need: the model libraries for the
    model's queue, the search providers (and the MCP SDK, only where the operator configured an MCP
    server: with none, no MCP call can succeed) for the tools' queue, and both for the main queue,
    which keeps every activity. A worker serving only one of them pays no import it cannot use
    (the model libraries alone are seconds of CPU).

    Then what a first call would pay (``activities.model.clients.warm`` for the model, the TLS
    contexts for both). Best effort: a setting it trips on fails the first call with its own
    message instead."""
    model = bool(MODEL_KINDS & set(kinds))
    if model:
        await load(MODEL_MODULE)
    if {"main", "tools"} & set(kinds):
        await load(SEARCH_PROVIDERS_MODULE)  # the first search's import of every provider: ~110 ms of CPU
        if settings.mcp_servers:
            await load(MCP_MODULE)
    try:
        await asyncio.to_thread(_warm_first_calls, settings, model)
    except Exception as error:
        _log.warning("The first calls' warm-up failed (%s): the first call pays for it", error)
