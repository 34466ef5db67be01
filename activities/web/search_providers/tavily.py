"""Tavily (``SEARCH_API=tavily``, the default) through tavily-python's ``AsyncTavilyClient``.

The client runs on an httpx client we own, so the last response can be recorded: tavily-python
turns failures into its own exception types and drops the response, and with it the status code
and ``Retry-After`` the error sorting needs. That client is kept per endpoint and key
(``activities/support/pooled_http.py``), so searches reuse its connections.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import httpx
from tavily import AsyncTavilyClient
from tavily import errors as tavily_errors
from temporalio.exceptions import ApplicationError

from activities.support.pooled_http import build_client, pooled_client
from activities.web.search import (
    DEFAULT_PROVIDER,
    missing_setting_error,
    register_provider,
    status_error,
    unavailable_error,
)
from config.settings import Settings
from workflows.contracts.tool_activities import SearchRequest, SearchResponse, SearchResult

LABEL = "Tavily"
TAVILY_MAX_RESULTS = 20  # the API rejects larger values
# Status codes tavily-python folds into ForbiddenError, with what Tavily documents them to mean.
_TAVILY_REFUSALS = {
    403: "access forbidden",
    432: "key or plan usage limit exceeded",
    433: "pay-as-you-go spending limit exceeded",
}


class _LastResponse:
    """The last response of one search (see the module docstring), recorded by the kept client's
    response hook into the search that is running: searches share the client, not this."""

    def __init__(self) -> None:
        self.response: httpx.Response | None = None


_LAST_RESPONSE: ContextVar[_LastResponse | None] = ContextVar("tavily_last_response", default=None)


async def _record(response: httpx.Response) -> None:
    last = _LAST_RESPONSE.get()
    if last is not None:
        last.response = response


@register_provider(DEFAULT_PROVIDER)
class TavilySearch:
    """Tavily through tavily-python's ``AsyncTavilyClient`` on an httpx client we own."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    async def search(self, request: SearchRequest) -> SearchResponse:
        """One ``POST /search``; failures are mapped by ``tavily_error``."""
        api_key = self._settings.tavily_api_key
        if not api_key:
            raise missing_setting_error(LABEL, "TAVILY_API_KEY")
        base_url = self._base_url_kwargs()
        # tavily-python puts the key and the endpoint into the client it is given: both are in the key.
        http = pooled_client(("tavily", api_key, tuple(base_url.items())), _build_client)
        client = AsyncTavilyClient(api_key=api_key, client=http, **base_url)
        last = _LastResponse()
        recording = _LAST_RESPONSE.set(last)
        try:
            payload = await client.search(
                request.query,
                max_results=min(max(request.max_results, 1), TAVILY_MAX_RESULTS),
                include_raw_content=False,
                include_images=False,
                # DeerFlow's SEARCH_ENGINE domain filters (None: tavily-python leaves them out).
                include_domains=self._settings.search_include_domains or None,
                exclude_domains=self._settings.search_exclude_domains or None,
                timeout=self._settings.search_timeout_seconds,
            )
        except Exception as exc:
            error = tavily_error(exc, last.response, self._settings.search_timeout_seconds)
            if error is None:
                raise
            raise error from exc
        finally:
            _LAST_RESPONSE.reset(recording)
        return tavily_response(request.query, payload)

    def _base_url_kwargs(self) -> dict[str, str]:
        # Omitted when unset so tavily-python keeps its own default endpoint.
        base_url = self._settings.tavily_base_url
        return {"api_base_url": base_url.rstrip("/")} if base_url else {}


def _build_client() -> httpx.AsyncClient:
    return build_client(event_hooks={"response": [_record]})


def tavily_response(query: str, payload: Any) -> SearchResponse:
    """Tavily's JSON to our contract; results without a URL are dropped, not guessed at."""
    if not isinstance(payload, dict):
        raise unavailable_error(f"Tavily answered with {type(payload).__name__}, not a JSON object.")
    results = [
        SearchResult(
            title=str(item.get("title") or item["url"]),
            url=str(item["url"]),
            content=str(item.get("content") or ""),
            raw_content=item.get("raw_content") or None,
            score=item.get("score"),
            published_date=item.get("published_date") or None,
        )
        for item in payload.get("results") or []
        if isinstance(item, dict) and item.get("url")
    ]
    return SearchResponse(query=str(payload.get("query") or query), results=results)


def tavily_error(exc: Exception, response: httpx.Response | None, timeout: float) -> ApplicationError | None:
    """Sort a tavily-python/httpx failure into our three types; ``None`` for the unknown."""
    if isinstance(exc, tavily_errors.TimeoutError | httpx.TimeoutException):
        return unavailable_error(f"Tavily did not answer within {timeout:g} s.")
    if isinstance(exc, httpx.TransportError):
        return unavailable_error(f"Could not reach Tavily: {type(exc).__name__}: {exc}")
    status = _error_status(exc, response)
    if status is None:
        if isinstance(exc, ValueError):  # a 200 whose body is not JSON
            return unavailable_error(f"Tavily sent an unreadable answer: {exc}")
        return None
    return status_error(
        LABEL,
        status,
        _detail(exc, response),
        retry_after=response.headers.get("Retry-After") if response is not None else None,
        key_env="TAVILY_API_KEY",
        refusals=_TAVILY_REFUSALS,
        base_url_env="TAVILY_BASE_URL",
    )


def _error_status(exc: Exception, response: httpx.Response | None) -> int | None:
    """The HTTP status behind a failure, from the recorded response or the exception type."""
    if response is not None and response.status_code >= 400:
        return response.status_code
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code
    by_type: list[tuple[type[Exception], int]] = [
        (tavily_errors.UsageLimitExceededError, 429),
        (tavily_errors.InvalidAPIKeyError, 401),
        (tavily_errors.ForbiddenError, 403),
        (tavily_errors.BadRequestError, 400),
    ]
    return next((code for kind, code in by_type if isinstance(exc, kind)), None)


def _detail(exc: Exception, response: httpx.Response | None) -> str:
    """The server's own explanation (``{"detail": {"error": ...}}``), else the exception text."""
    if response is not None and response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        detail = body.get("detail") if isinstance(body, dict) else None
        if isinstance(detail, dict) and detail.get("error"):
            return str(detail["error"])
        if isinstance(detail, str) and detail:
            return detail
        if response.text.strip():
            return response.text.strip()[:300]
    return "" if isinstance(exc, httpx.HTTPStatusError) else str(exc).strip()
