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
_log = logging.getLogger(__name__)


async def load(name: str) -> ModuleType:
    """The module ``name``, imported in a thread if it is not yet (the import lock makes a
    concurrent second import wait for the first, never run twice)."""
    return await asyncio.to_thread(importlib.import_module, name)


def _warm_first_calls(clients: ModuleType, settings: Settings) -> None:
    tls.warm()
    clients.warm(settings)


async def preload(settings: Settings, kinds: Collection[str]) -> None:
    """Warm what the activities of the queue ``kinds`` served here need: the model libraries for the
    model's queue, the search providers (and the MCP SDK, only where the operator configured an MCP
    server: with none, no MCP call can succeed) for the tools' queue, and both for the main queue,
    which keeps every activity. A worker serving only one of them pays no import it cannot use
    (the model libraries alone are seconds of CPU).

    For the model, the clients' ``warm`` then pays what the first call would
    (``activities.model.clients.warm``), the TLS contexts included. Best effort: a setting it trips
    on fails the first call with its own message instead."""
    if {"main", "model"} & set(kinds):
        await load(MODEL_MODULE)
        try:
            await asyncio.to_thread(_warm_first_calls, await load(CLIENTS_MODULE), settings)
        except Exception as error:
            _log.warning("The model client's warm-up failed (%s): the first model call pays for it", error)
    if {"main", "tools"} & set(kinds):
        # The first search imports every bundled provider (~110 ms of CPU, on the event loop), and
        # the first crawl would build its TLS context.
        await load(SEARCH_PROVIDERS_MODULE)
        await asyncio.to_thread(tls.warm)
        if settings.mcp_servers:
            await load(MCP_MODULE)
