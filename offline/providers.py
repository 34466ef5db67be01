"""Starts the bundled offline providers: the demonstration model and the local search corpus.

A user evaluating the product may have no API keys. With no ``OPENAI_API_KEY`` the worker serves
these fakes on loopback and builds its settings with the overrides that point at them, so the
same code path (real ``langchain-openai`` and ``tavily-python`` clients over HTTP) runs with or
without keys. The environment itself is left as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

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
    # The settings (by env name) that point at the servers: ``load_settings({**environ, **overrides})``.
    overrides: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        for server in (self.model, self.search):
            if server is not None:
                server.stop()


def start_offline_providers(environ: Mapping[str, str] = os.environ) -> OfflineProviders:
    """Serve whichever providers ``environ`` has no key for, and say which settings point at them.

    ``DEERFLOW_OFFLINE_MODEL_LATENCY`` / ``DEERFLOW_OFFLINE_SEARCH_LATENCY`` (seconds) make the
    fakes answer as slowly as real providers do, for demos, crash drills and benchmarks.
    """
    model = search = None
    overrides: dict[str, str] = {}
    if not environ.get("OPENAI_API_KEY"):
        model = FakeModelServer(latency_seconds=float(environ.get("DEERFLOW_OFFLINE_MODEL_LATENCY", "0"))).start()
        overrides.update(OPENAI_BASE_URL=model.base_url, OPENAI_API_KEY="offline", BASIC_MODEL="deerflow-offline-demo",
                         DEERFLOW_OFFLINE_DEMO="1")
    if not environ.get("TAVILY_API_KEY") and environ.get("SEARCH_API", "tavily") == "tavily":
        latency = float(environ.get("DEERFLOW_OFFLINE_SEARCH_LATENCY", "0"))
        search = FakeSearchServer(latency_seconds=latency).start()
        overrides.update(TAVILY_BASE_URL=search.base_url, TAVILY_API_KEY="offline")
    return OfflineProviders(model=model, search=search, overrides=overrides)
