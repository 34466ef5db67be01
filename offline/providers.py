"""Starts the bundled offline providers: the demonstration model and the local search corpus.

A user evaluating the product may have no API keys. With no model configured (no key and no
endpoint, in the environment, ``.env`` or ``conf.yaml``: the loaded ``Settings`` decide) the worker serves
these fakes on loopback and builds its settings with the overrides that point at them, so the
same code path (real ``langchain-openai`` and ``tavily-python`` clients over HTTP) runs with or
without keys. The environment itself is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from config.settings import Settings

if TYPE_CHECKING:  # imported where they start: the CLI reads the banner without the scripted agents
    from offline.model_server import FakeModelServer
    from offline.search_server import FakeSearchServer

OFFLINE_BANNER = (
    "OFFLINE DEMONSTRATION MODEL: no model is configured (no OPENAI_API_KEY or OPENAI_BASE_URL, and no "
    "BASIC_MODEL api_key or base_url in conf.yaml), so a deterministic built-in model and a small bundled "
    "search corpus stand in for real providers. Configure a model (and TAVILY_API_KEY) for real research."
)
OFFLINE_MODEL_BANNER = (
    "OFFLINE DEMONSTRATION MODEL: no model is configured (no OPENAI_API_KEY or OPENAI_BASE_URL, and no "
    "BASIC_MODEL api_key or base_url in conf.yaml), so a deterministic built-in model stands in for a real "
    "one (searches are real). Configure a model for real research."
)
OFFLINE_SEARCH_BANNER = (
    "OFFLINE SEARCH CORPUS: the model is real, but no TAVILY_API_KEY is set, so searches read a small "
    "bundled corpus of 42 documents instead of the web. Set TAVILY_API_KEY (or SEARCH_API with its key) "
    "for real research."
)


# Every setting that chooses the model or search provider: what points a worker at the fakes, and
# what is kept from a worker the tests or benches start, so a developer's real keys never reach it.
PROVIDER_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "BASIC_MODEL", "DEERFLOW_OFFLINE_DEMO",
                      "TAVILY_API_KEY", "TAVILY_BASE_URL", "DEERFLOW_OFFLINE_SEARCH")


def model_env(model: FakeModelServer) -> dict[str, str]:
    """The settings that send a worker's model calls to ``model``."""
    return {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "offline", "BASIC_MODEL": "deerflow-offline-demo",
            "DEERFLOW_OFFLINE_DEMO": "1"}


def search_env(search: FakeSearchServer) -> dict[str, str]:
    """The settings that send a worker's Tavily searches to ``search``."""
    return {"TAVILY_BASE_URL": search.base_url, "TAVILY_API_KEY": "offline", "DEERFLOW_OFFLINE_SEARCH": "1"}


def offline_env(model: FakeModelServer, search: FakeSearchServer) -> dict[str, str]:
    """The settings for a worker served entirely by these fakes."""
    return {**model_env(model), **search_env(search)}


def without_provider_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` minus :data:`PROVIDER_VARIABLES`: a worker started with it serves the offline
    providers itself, or uses the ones the caller adds."""
    return {key: value for key, value in environ.items() if key not in PROVIDER_VARIABLES}


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


def offline_parts(settings: Settings) -> tuple[bool, bool]:
    """Which providers ``settings`` leave to the bundled fakes: (the model, the search)."""
    return (not settings.model_configured(),
            not settings.tavily_api_key and settings.search_api == "tavily")


def offline_banner(settings: Settings) -> str | None:
    """What a worker on ``settings`` must say at start, and the CLI when it starts one; None: all real."""
    match offline_parts(settings):
        case (True, True):
            return OFFLINE_BANNER
        case (True, False):
            return OFFLINE_MODEL_BANNER
        case (False, True):
            return OFFLINE_SEARCH_BANNER
    return None


def start_offline_providers(settings: Settings) -> OfflineProviders:
    """Serve whichever providers ``settings`` name none for, and say which settings point at them.

    ``DEERFLOW_OFFLINE_MODEL_LATENCY`` / ``DEERFLOW_OFFLINE_SEARCH_LATENCY`` (seconds) make the fakes
    answer as slowly as real providers do, for demos, crash drills and benchmarks.
    """
    from offline.model_server import FakeModelServer
    from offline.search_server import FakeSearchServer

    model = search = None
    overrides: dict[str, str] = {}
    offline_model, offline_search = offline_parts(settings)
    if offline_model:
        model = FakeModelServer(latency_seconds=settings.offline_model_latency).start()
        overrides.update(model_env(model))
    if offline_search:
        search = FakeSearchServer(latency_seconds=settings.offline_search_latency).start()
        overrides.update(search_env(search))
    return OfflineProviders(model=model, search=search, overrides=overrides)


def with_overrides(settings: Settings, overrides: Mapping[str, str]) -> Settings:
    """``settings`` with ``overrides`` (by env name, as :class:`OfflineProviders` gives them) applied."""
    names = {field.alias: name for name, field in Settings.model_fields.items()}
    changed = {names[key]: value for key, value in overrides.items()}
    updated = Settings.model_validate({**settings.model_dump(), **changed})
    return updated.loaded_from(settings.variables(), settings.sources())
