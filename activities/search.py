"""The ``web_search`` activity: one search-engine query, trimmed before it enters workflow history.

Why it is built this way:

* Providers sit behind a small registry keyed by ``settings.search_api`` (``SEARCH_API``), so
  DuckDuckGo, Brave, Serper, SearxNG, arXiv or Wikipedia can each be added later as one class
  with a ``search`` coroutine. Only Tavily exists today.
* Failures are sorted into three ``ApplicationError`` types that the workflow's retry policy
  can act on, so a wrong key fails the run at once instead of burning retries:

  - ``SearchRateLimited`` (retryable; ``next_retry_delay`` is the server's ``Retry-After``),
  - ``SearchUnavailable`` (retryable: 5xx, timeouts, connection failures, unreadable answers),
  - ``SearchConfigError`` (non-retryable: missing/rejected key, forbidden, bad request,
    unknown provider).

* Result text is capped here, for every provider alike, because activity results are stored
  in workflow history and whole web pages would bloat it.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import httpx
from tavily import AsyncTavilyClient
from tavily import errors as tavily_errors
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.settings import Settings, get_settings
from workflows.models import SearchRequest, SearchResponse, SearchResult

RATE_LIMITED = "SearchRateLimited"
UNAVAILABLE = "SearchUnavailable"
CONFIG_ERROR = "SearchConfigError"
DEFAULT_PROVIDER = "tavily"

ELLIPSIS = "\u2026"


# ---------------------------------------------------------------- errors


def config_error(message: str) -> ApplicationError:
    """A mistake only a human can fix (key, plan, request shape): retrying cannot help."""
    return ApplicationError(message, type=CONFIG_ERROR, non_retryable=True)


def unavailable_error(message: str) -> ApplicationError:
    """A transient failure of the provider or the network: Temporal's backoff retries it."""
    return ApplicationError(message, type=UNAVAILABLE)


def rate_limited_error(message: str, retry_after: timedelta | None) -> ApplicationError:
    """Retryable, but not before the provider said so (when it said anything)."""
    return ApplicationError(message, type=RATE_LIMITED, next_retry_delay=retry_after)


def parse_retry_after(value: str | None, now: datetime | None = None) -> timedelta | None:
    """``Retry-After`` is either delay-seconds or an HTTP date (RFC 9110 section 10.2.3)."""
    if not value or not value.strip():
        return None
    text = value.strip()
    try:
        return timedelta(seconds=max(float(text), 0.0))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when - (now or datetime.now(UTC)), timedelta(0))


# ---------------------------------------------------------------- provider registry


class SearchProvider(Protocol):
    """One search backend. ``search`` raises only the three ApplicationError types above
    for failures it understands; anything else propagates and Temporal retries it."""

    async def search(self, request: SearchRequest) -> SearchResponse:
        """Run one query; results may be untrimmed, the activity trims them."""
        ...


ProviderFactory = Callable[[Settings], SearchProvider]
_PROVIDERS: dict[str, ProviderFactory] = {}


def register_provider(name: str) -> Callable[[ProviderFactory], ProviderFactory]:
    """Make a provider selectable as ``SEARCH_API=<name>`` (case-insensitive)."""

    def decorator(factory: ProviderFactory) -> ProviderFactory:
        _PROVIDERS[name.lower()] = factory
        return factory

    return decorator


def supported_providers() -> list[str]:
    """Names ``SEARCH_API`` may take."""
    return sorted(_PROVIDERS)


def get_provider(settings: Settings) -> SearchProvider:
    """The provider ``settings.search_api`` names; an unknown name is a configuration error."""
    # Compose passes unset variables as "", which must mean "the default", not "no provider".
    factory = _PROVIDERS.get(settings.search_api.strip().lower() or DEFAULT_PROVIDER)
    if factory is None:
        raise config_error(
            f"SEARCH_API={settings.search_api!r} is not a supported search provider "
            f"(supported: {', '.join(supported_providers())})."
        )
    return factory(settings)


# ---------------------------------------------------------------- trimming


def cap_text(text: str, limit: int) -> str:
    """At most ``limit`` characters; a cut is marked with an ellipsis so readers know."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    return text[: limit - 1].rstrip() + ELLIPSIS


def trim_response(response: SearchResponse, max_results: int, content_chars: int) -> SearchResponse:
    """Keep the first ``max_results`` results and cap their text, so history stays small."""
    results = [
        result.model_copy(
            update={
                "content": cap_text(result.content, content_chars),
                "raw_content": cap_text(result.raw_content, content_chars) if result.raw_content else None,
            }
        )
        for result in response.results[: max(max_results, 0)]
    ]
    return SearchResponse(query=response.query, results=results)


# ---------------------------------------------------------------- Tavily

TAVILY_MAX_RESULTS = 20  # the API rejects larger values
# Status codes tavily-python folds into ForbiddenError, with what Tavily documents them to mean.
_TAVILY_REFUSALS = {
    403: "access forbidden",
    432: "key or plan usage limit exceeded",
    433: "pay-as-you-go spending limit exceeded",
}
_RETRYABLE_STATUSES = {408, 425}


class _LastResponse:
    """An httpx response hook keeping the last response.

    tavily-python turns a 429 into ``UsageLimitExceededError(detail)`` and drops the response,
    so without this the ``Retry-After`` header and the status code would be lost.
    """

    def __init__(self) -> None:
        self.response: httpx.Response | None = None

    async def record(self, response: httpx.Response) -> None:
        self.response = response


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default TLS setup, built once: loading the CA bundle costs ~0.1 s per client."""
    return httpx.create_ssl_context()


@register_provider(DEFAULT_PROVIDER)
class TavilySearch:
    """Tavily through tavily-python's ``AsyncTavilyClient`` on an httpx client we own."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    async def search(self, request: SearchRequest) -> SearchResponse:
        """One ``POST /search``; failures are mapped by ``tavily_error``."""
        api_key = self._settings.tavily_api_key
        if not api_key:
            raise config_error("Tavily needs an API key: set TAVILY_API_KEY (or pick another SEARCH_API).")
        last = _LastResponse()
        async with httpx.AsyncClient(verify=_ssl_context(), event_hooks={"response": [last.record]}) as http:
            client = AsyncTavilyClient(api_key=api_key, client=http, **self._base_url_kwargs())
            try:
                payload = await client.search(
                    request.query,
                    max_results=min(max(request.max_results, 1), TAVILY_MAX_RESULTS),
                    include_raw_content=False,
                    include_images=False,
                    timeout=self._settings.search_timeout_seconds,
                )
            except Exception as exc:
                error = tavily_error(exc, last.response, self._settings.search_timeout_seconds)
                if error is None:
                    raise
                raise error from exc
        return tavily_response(request.query, payload)

    def _base_url_kwargs(self) -> dict[str, str]:
        # Omitted when unset so tavily-python keeps its own default endpoint.
        base_url = self._settings.tavily_base_url
        return {"api_base_url": base_url.rstrip("/")} if base_url else {}


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
    return _status_error(status, _detail(exc, response), response)


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


def _status_error(status: int, detail: str, response: httpx.Response | None) -> ApplicationError:
    """Map an HTTP status to an ApplicationError with a message naming provider and cause."""
    suffix = f": {detail}" if detail else "."
    if status == 429:
        retry_after = parse_retry_after(response.headers.get("Retry-After") if response else None)
        return rate_limited_error(f"Tavily rate limit reached (429){suffix}", retry_after)
    if status >= 500 or status in _RETRYABLE_STATUSES:
        return unavailable_error(f"Tavily is unavailable ({status}){suffix}")
    if status == 401:
        return config_error(f"Tavily rejected the API key (401){suffix} Check TAVILY_API_KEY.")
    if status in _TAVILY_REFUSALS:
        return config_error(f"Tavily refused the request ({status}, {_TAVILY_REFUSALS[status]}){suffix}")
    if status == 400:
        return config_error(f"Tavily rejected the request as invalid (400){suffix}")
    return config_error(f"Tavily answered {status}{suffix} Check TAVILY_BASE_URL.")


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


# ---------------------------------------------------------------- the activity


@activity.defn(name="web_search")
async def web_search(request: SearchRequest) -> SearchResponse:
    """Search with the configured provider; at most ``max_results`` results, text capped."""
    settings = get_settings()
    provider = get_provider(settings)  # first, so a bad SEARCH_API is reported on any query
    if request.max_results <= 0 or not request.query.strip():
        return SearchResponse(query=request.query)
    response = await provider.search(request)
    return trim_response(response, request.max_results, settings.search_content_chars)
