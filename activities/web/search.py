"""The ``web_search`` activity: one search-engine query, trimmed before it enters workflow history.

Why it is built this way:

* Providers sit behind a small registry keyed by ``settings.search_api`` (``SEARCH_API``). Each
  lives in its own module under ``activities/web/search_providers/`` (Tavily, DuckDuckGo, Brave,
  Serper, SearxNG, arXiv, Wikipedia) and registers itself with ``@register_provider``. They are
  imported on first use, not here, because they import this module's helpers.
* Failures are sorted into three ``ApplicationError`` types that the workflow's retry policy
  can act on, so a wrong key fails the run at once instead of burning retries:

  - ``SearchRateLimited`` (retryable; ``next_retry_delay`` is the server's ``Retry-After``),
  - ``SearchUnavailable`` (retryable: 5xx, timeouts, connection failures, unreadable answers),
  - ``SearchConfigError`` (non-retryable: missing/rejected key, forbidden, bad request,
    unknown provider).

  ``status_error`` holds the HTTP-status part of that sorting once, so every provider words its
  failures alike ("Brave Search rejected the API key (401): ...").
* Result text is capped here, for every provider alike, because activity results are stored
  in workflow history and whole web pages would bloat it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.support.lazy import SEARCH_PROVIDERS_MODULE
from activities.support.limits import provider_slot
from activities.support.provider_registry import ProviderRegistry
from activities.support.retry_pacing import paced_retries
from config.settings import Settings
from runtime.heartbeat import heartbeating
from workflows.contracts.tool_activities import SearchRequest, SearchResponse

RATE_LIMITED = "SearchRateLimited"
UNAVAILABLE = "SearchUnavailable"
CONFIG_ERROR = "SearchConfigError"
DEFAULT_PROVIDER = "tavily"

ELLIPSIS = "\u2026"
# Statuses that mean "try again later" although they are not 5xx.
RETRYABLE_STATUSES = frozenset({408, 425})


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


def _with_stop(text: str) -> str:
    """End a provider's explanation with punctuation, so a hint can follow it as a sentence."""
    text = text.strip()
    return text if not text or text.endswith((".", "!", "?")) else text + "."


def status_error(
    provider: str,
    status: int,
    detail: str = "",
    *,
    retry_after: str | None = None,
    key_env: str | None = None,
    key_rejected: bool = False,
    refusals: Mapping[int, str] | None = None,
    base_url_env: str | None = None,
    hints: Mapping[int, str] | None = None,
) -> ApplicationError:
    """Sort one HTTP failure status into our three types, with a message naming the provider.

    ``key_rejected`` marks a status other than 401 that the provider uses for a bad key (Brave
    answers 422). ``refusals`` names provider-specific refusal statuses (Tavily's 432/433);
    ``hints`` adds a provider-specific remedy for a status (SearxNG's 403).
    """
    suffix = f": {_with_stop(detail)}" if detail.strip() else "."
    hint = (hints or {}).get(status, "")
    tail = f" {hint}" if hint else ""
    check_key = f" Check {key_env}." if key_env else ""
    if status == 429:
        return rate_limited_error(f"{provider} rate limit reached (429){suffix}", parse_retry_after(retry_after))
    if status >= 500 or status in RETRYABLE_STATUSES:
        return unavailable_error(f"{provider} is unavailable ({status}){suffix}")
    if key_rejected or (status == 401 and key_env):
        return config_error(f"{provider} rejected the API key ({status}){suffix}{check_key}{tail}")
    if status == 401:  # a keyless provider (or a proxy in front of it) wants credentials
        return config_error(f"{provider} refused the request (401, unauthorized){suffix}{tail}")
    if refusals and status in refusals:
        return config_error(f"{provider} refused the request ({status}, {refusals[status]}){suffix}{check_key}{tail}")
    if status == 403:
        return config_error(f"{provider} refused the request (403, forbidden){suffix}{check_key}{tail}")
    if status in (400, 422):
        return config_error(f"{provider} rejected the request as invalid ({status}){suffix}{tail}")
    check_url = f" Check {base_url_env}." if base_url_env else ""
    return config_error(f"{provider} answered {status}{suffix}{check_url}{tail}")


def missing_setting_error(provider: str, env: str, what: str = "an API key") -> ApplicationError:
    """A provider was chosen without the setting it cannot work without."""
    return config_error(f"{provider} needs {what}: set {env} (or pick another SEARCH_API).")


# ---------------------------------------------------------------- provider registry


class SearchProvider(Protocol):
    """One search backend. ``search`` raises only the three ApplicationError types above
    for failures it understands; anything else propagates and Temporal retries it."""

    async def search(self, request: SearchRequest) -> SearchResponse:
        """Run one query; results may be untrimmed, the activity trims them."""
        ...


def _load_builtin_providers() -> None:
    """Import the bundled providers so they register; cheap after the first call.

    Done lazily because the provider modules import this one for the helpers above.
    """
    importlib.import_module(SEARCH_PROVIDERS_MODULE)


PROVIDERS: ProviderRegistry[SearchProvider] = ProviderRegistry(
    "SEARCH_API", "search provider", DEFAULT_PROVIDER, config_error, load=_load_builtin_providers
)
register_provider = PROVIDERS.register
supported_providers = PROVIDERS.names


def get_provider(settings: Settings) -> SearchProvider:
    """The provider ``settings.search_api`` names; an unknown name is a configuration error."""
    return PROVIDERS.create(settings.search_api, settings)


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


# ---------------------------------------------------------------- the activity


class SearchActivities:
    """``web_search``, built with the worker's settings (provider, keys, caps, concurrency)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name="web_search")
    @heartbeating
    @paced_retries
    async def web_search(self, request: SearchRequest) -> SearchResponse:
        """Search with the configured provider; at most ``max_results`` results, text capped."""
        provider = get_provider(self.settings)  # first, so a bad SEARCH_API is reported on any query
        if request.max_results <= 0 or not request.query.strip():
            return SearchResponse(query=request.query)
        async with provider_slot("search", self.settings.search_max_concurrency):
            response = await provider.search(request)
        return trim_response(response, request.max_results, self.settings.search_content_chars)
