"""The tool activities' inputs and outputs: web search, local document search, MCP listing and calls,
crawl and the coder's Python. Provider text is made carriable here (no lone surrogates)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from workflows.contracts.base import Contract
from workflows.contracts.chat import ToolSpec
from workflows.text.untrusted_text import without_lone_surrogates


class SearchRequest(Contract):
    query: str
    max_results: int = 3


class SearchResult(Contract):
    title: str
    url: str
    content: str
    raw_content: str | None = None
    score: float | None = None
    published_date: str | None = None

    @field_validator("title", "url", "content", "raw_content", "published_date")
    @classmethod
    def _carriable(cls, value: str | None) -> str | None:
        """A provider's "\\ud800" escape is a lone surrogate, which no payload can carry (the search
        failed on every retry): it reads as U+FFFD (issue #42 §2)."""
        return None if value is None else without_lone_surrogates(value)


class SearchResponse(Contract):
    query: str
    results: list[SearchResult] = Field(default_factory=list)


class LocalSearchRequest(Contract):
    """Input of ``local_search_tool``: search only within the run's ``resources``."""

    query: str
    resources: list[str] = Field(default_factory=list)
    max_results: int = 3


class MCPListRequest(Contract):
    """List one operator server's tools for ``agent`` (none if the operator did not add it there)."""

    server_name: str
    agent: str
    enabled_tools: list[str] | None = None  # the request's narrowing, if any


class MCPToolList(Contract):
    server_name: str
    tools: list[ToolSpec] = Field(default_factory=list)


class MCPCallRequest(Contract):
    server_name: str
    tool: str
    enabled_tools: list[str] | None = None  # the request's narrowing, if any
    arguments: dict[str, Any] = Field(default_factory=dict)


class MCPCallResult(Contract):
    content: str
    is_error: bool = False


class CrawlRequest(Contract):
    url: str


class CrawlResult(Contract):
    url: str  # the final URL, after redirects
    title: str | None = None
    markdown: str
    truncated: bool = False


class PythonRequest(Contract):
    code: str
    timeout_seconds: float = 30.0


class PythonResult(Contract):
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    # Set when the sandbox stopped the code: "timeout", "memory", "cpu", "output".
    stopped: str | None = None
    duration_seconds: float = 0.0
