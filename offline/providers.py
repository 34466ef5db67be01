"""Starts the bundled offline providers: the demonstration model and the local search corpus.

A user evaluating the product may have no API keys. With no ``OPENAI_API_KEY`` the worker serves
these fakes on loopback and points its own settings at them, so the same code path (real
``langchain-openai`` and ``tavily-python`` clients over HTTP) runs with or without keys.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from offline.model_server import FakeModelServer
from offline.search_server import FakeSearchServer

OFFLINE_BANNER = (
    "OFFLINE DEMONSTRATION MODEL: no OPENAI_API_KEY is set, so a deterministic built-in model and a "
    "small bundled search corpus stand in for real providers. Set OPENAI_API_KEY (and TAVILY_API_KEY) "
    "for real research."
)


@dataclass
class OfflineProviders:
    model: FakeModelServer | None
    search: FakeSearchServer | None

    def stop(self) -> None:
        for server in (self.model, self.search):
            if server is not None:
                server.stop()


def start_offline_providers(environ: dict[str, str] | os._Environ[str] = os.environ) -> OfflineProviders:
    """Serve whichever providers have no key, and point ``environ`` at them.

    ``DEERFLOW_OFFLINE_MODEL_LATENCY`` / ``DEERFLOW_OFFLINE_SEARCH_LATENCY`` (seconds) make the
    fakes answer as slowly as real providers do, for demos, crash drills and benchmarks.
    """
    model = search = None
    if not environ.get("OPENAI_API_KEY"):
        model = FakeModelServer(latency_seconds=float(environ.get("DEERFLOW_OFFLINE_MODEL_LATENCY", "0"))).start()
        environ["OPENAI_BASE_URL"] = model.base_url
        environ["OPENAI_API_KEY"] = "offline"
        environ["BASIC_MODEL"] = "deerflow-offline-demo"
        environ["DEERFLOW_OFFLINE_DEMO"] = "1"
    if not environ.get("TAVILY_API_KEY") and environ.get("SEARCH_API", "tavily") == "tavily":
        latency = float(environ.get("DEERFLOW_OFFLINE_SEARCH_LATENCY", "0"))
        search = FakeSearchServer(latency_seconds=latency).start()
        environ["TAVILY_BASE_URL"] = search.base_url
        environ["TAVILY_API_KEY"] = "offline"
    return OfflineProviders(model=model, search=search)
