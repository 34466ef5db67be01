"""Web search (``SEARCH_API`` and each provider's key and endpoint) and the local documents (RAG)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from config.deerflow import SEARCH_API_NAMES
from config.groups.base import SettingsGroup, comma_separated

# The providers activities/web/search_providers registers (SEARCH_API), checked at start, not per search.
SEARCH_APIS = ("tavily", "brave", "duckduckgo", "serper", "searx", "arxiv", "wikipedia")


class SearchSettings(SettingsGroup):
    """The search provider, its key and endpoint, and where documents are searched."""

    search_api: str = Field(default="tavily", alias="SEARCH_API")
    """`tavily`, `duckduckgo`, `brave` (DeerFlow's `brave_search`), `serper`, `searx`, `arxiv` or `wikipedia`; another
    name is refused at start.
    """
    tavily_api_key: str | None = Field(default=None, alias="TAVILY_API_KEY")
    """Tavily's key. Unset with `SEARCH_API=tavily`: the bundled offline corpus."""
    tavily_base_url: str | None = Field(default=None, alias="TAVILY_BASE_URL")
    """Tavily's endpoint. Unset: Tavily."""
    search_content_chars: int = Field(default=2000, alias="SEARCH_CONTENT_CHARS")
    """Characters kept of each search result's content."""
    # DeerFlow's SEARCH_ENGINE.include_domains / exclude_domains (Tavily only; comma-separated in env).
    search_include_domains: list[str] = Field(default_factory=list, alias="SEARCH_INCLUDE_DOMAINS")
    """Comma-separated domains Tavily searches are limited to."""
    search_exclude_domains: list[str] = Field(default_factory=list, alias="SEARCH_EXCLUDE_DOMAINS")
    """Comma-separated domains Tavily searches exclude."""
    # Per-request timeout of the search provider's HTTP call (tavily-python caps it at 120 s).
    search_timeout_seconds: float = Field(default=20.0, gt=0, alias="SEARCH_TIMEOUT_SECONDS")
    """Seconds per search call. A worker keeps its connection to each search provider (and to RAGFlow and the speech
    endpoint) open for 30 s between calls, so a research step's searches skip the TLS handshake; no cookies are
    kept.
    """
    # The other SEARCH_API providers. An unset base URL means the provider's public endpoint.
    brave_search_api_key: str | None = Field(default=None, alias="BRAVE_SEARCH_API_KEY")
    """Brave Search's key."""
    brave_base_url: str | None = Field(default=None, alias="BRAVE_BASE_URL")  # .../res/v1
    """Brave Search's endpoint (`.../res/v1`). Unset: Brave."""
    serper_api_key: str | None = Field(default=None, alias="SERPER_API_KEY")
    """Serper's key (Google results)."""
    serper_base_url: str | None = Field(default=None, alias="SERPER_BASE_URL")
    """Serper's endpoint. Unset: Serper."""
    searx_host: str | None = Field(default=None, alias="SEARX_HOST")  # a SearXNG instance, json format enabled
    """A SearXNG instance with the `json` format enabled."""
    arxiv_base_url: str | None = Field(default=None, alias="ARXIV_BASE_URL")  # the .../api/query endpoint
    """arXiv's `.../api/query` endpoint. Unset: arXiv."""
    wikipedia_base_url: str | None = Field(default=None, alias="WIKIPEDIA_BASE_URL")  # .../w/api.php
    """A MediaWiki `.../w/api.php` endpoint. Unset: `WIKIPEDIA_LANG`'s Wikipedia."""
    wikipedia_lang: str = Field(default="en", alias="WIKIPEDIA_LANG")  # used when WIKIPEDIA_BASE_URL is unset
    """Which Wikipedia, when `WIKIPEDIA_BASE_URL` is unset."""
    duckduckgo_base_url: str | None = Field(default=None, alias="DUCKDUCKGO_BASE_URL")  # the .../html/ page
    """DuckDuckGo's `.../html/` page. Unset: DuckDuckGo."""
    # The proxy DuckDuckGo's client goes through (http://, https:// or socks5://; ddgs's own variable name).
    ddgs_proxy: str | None = Field(default=None, alias="DDGS_PROXY")
    """Proxy for DuckDuckGo's client (`http://`, `https://` or `socks5://`)."""

    # Local documents / RAG: "local" (files indexed on the worker) or "ragflow".
    rag_provider: str = Field(default="local", alias="RAG_PROVIDER")
    """`local` (SQLite FTS5 over a run's `resources`) or `ragflow`."""
    ragflow_api_url: str | None = Field(default=None, alias="RAGFLOW_API_URL")
    """RAGFlow's endpoint, with `RAG_PROVIDER=ragflow`."""
    ragflow_api_key: str | None = Field(default=None, alias="RAGFLOW_API_KEY")
    """RAGFlow's key."""

    @field_validator("search_api", mode="before")
    @classmethod
    def _search_api_name(cls, value: Any) -> Any:
        """DeerFlow's names for the same providers (``brave_search``) mean ours."""
        return SEARCH_API_NAMES.get(value, value) if isinstance(value, str) else value

    @field_validator("search_api")
    @classmethod
    def _known_search_api(cls, value: str) -> str:
        if value not in SEARCH_APIS:
            raise ValueError(f"{value!r} is not a search provider; use one of {', '.join(SEARCH_APIS)}")
        return value

    @field_validator("search_include_domains", "search_exclude_domains", mode="before")
    @classmethod
    def _split_domains(cls, value: Any) -> Any:
        return comma_separated(value, lambda host: host.lower())
