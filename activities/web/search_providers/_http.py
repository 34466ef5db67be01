"""What the providers that speak plain HTTP/JSON through httpx share.

Why a helper: Brave, Serper, SearxNG and Wikipedia differ only in URL, parameters and result
shape. Sending, timing out, and sorting transport failures and HTTP statuses into the activity's
three error types are the same for all of them, and should stay so. :class:`JsonSearch` is the
whole request of the simple ones (check the setting they need, send, sort a failure, parse), so
each of them only says what differs.
"""

from __future__ import annotations

import html
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
from temporalio.exceptions import ApplicationError

from activities.support.pooled_http import pooled_client
from activities.web.search import config_error, status_error, unavailable_error
from config.settings import Settings
from workflows.contracts.tool_activities import SearchRequest, SearchResponse

# Wikimedia's API etiquette asks for a descriptive User-Agent; the others do not mind one.
USER_AGENT = "deerflow-temporal/0.1 (deep-research worker; +https://github.com/bytedance/deer-flow)"
DETAIL_CHARS = 300
_TAG_RE = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class HttpProvider:
    """How one provider is named in messages, and which settings a message should point at."""

    label: str  # e.g. "Brave Search"
    base_url_env: str  # the setting that moves its endpoint, e.g. "BRAVE_BASE_URL"
    key_env: str | None = None  # the setting holding its key, if it needs one
    hints: dict[int, str] = field(default_factory=dict)  # status -> remedy sentence


def plain_text(value: Any) -> str:
    """Snippet HTML (``<strong>``, entities) to plain text, whitespace collapsed."""
    if not isinstance(value, str):
        return ""
    # Only up to the last ">": after it no tag can close, and from each "<" there the pattern would
    # scan to the end, which is quadratic in a snippet of "<" (a provider's text is nobody's).
    closed = value.rfind(">") + 1
    return " ".join(html.unescape(_TAG_RE.sub("", value[:closed]) + value[closed:]).split())


def check_base_url(provider: HttpProvider, url: str) -> str:
    """An http(s) URL without a trailing slash; anything else is a configuration error."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise config_error(f"{provider.base_url_env}={url!r} is not an http(s) URL ({provider.label}).")
    return url.strip().rstrip("/")


async def send(
    provider: HttpProvider,
    method: str,
    url: str,
    *,
    timeout: float,
    follow_redirects: bool = False,
    **kwargs: Any,
) -> httpx.Response:
    """One request on the provider's kept client (``activities/support/pooled_http.py``); transport
    failures become ApplicationErrors, any HTTP status is returned.

    Redirects are off by default: httpx keeps custom key headers (``X-API-KEY``) on a
    cross-origin redirect, so keyed providers must not follow them.
    """
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **kwargs.pop("headers", {})}
    http = pooled_client(("search", provider.label))
    try:
        return await http.request(method, url, headers=headers, timeout=timeout, follow_redirects=follow_redirects,
                                  **kwargs)
    except httpx.TimeoutException as exc:
        raise unavailable_error(f"{provider.label} did not answer within {timeout:g} s.") from exc
    except httpx.UnsupportedProtocol as exc:
        raise config_error(f"{provider.base_url_env} is not an http(s) URL ({provider.label}): {exc}") from exc
    except httpx.TransportError as exc:
        raise unavailable_error(f"Could not reach {provider.label}: {type(exc).__name__}: {exc}") from exc
    except httpx.InvalidURL as exc:
        raise config_error(f"{provider.base_url_env} gives an invalid URL ({provider.label}): {exc}") from exc


def response_detail(response: httpx.Response) -> str:
    """The server's own explanation of a failure, from the usual JSON shapes or the body text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            for key in ("detail", "message", "info"):
                if error.get(key):
                    return str(error[key])[:DETAIL_CHARS]
        for value in (error, body.get("message"), body.get("detail")):
            if isinstance(value, str) and value.strip():
                return value.strip()[:DETAIL_CHARS]
    return plain_text(response.text)[:DETAIL_CHARS]


def http_error(provider: HttpProvider, response: httpx.Response, *, key_rejected: bool = False) -> ApplicationError:
    """Sort a non-2xx response with the shared ``status_error`` rules."""
    return status_error(
        provider.label,
        response.status_code,
        response_detail(response),
        retry_after=response.headers.get("Retry-After"),
        key_env=provider.key_env,
        key_rejected=key_rejected,
        base_url_env=provider.base_url_env,
        hints=provider.hints,
    )


def json_object(provider: HttpProvider, response: httpx.Response) -> dict[str, Any]:
    """The body of a 2xx answer as a JSON object; anything else is an unreadable (retryable) answer."""
    try:
        payload = response.json()
    except ValueError as exc:
        raise unavailable_error(f"{provider.label} sent an unreadable answer (not JSON): {exc}") from exc
    if not isinstance(payload, dict):
        raise unavailable_error(f"{provider.label} answered with {type(payload).__name__}, not a JSON object.")
    return payload


def str_or_none(value: Any) -> str | None:
    """A non-empty string field, else ``None`` (providers send ``null``, ``""`` or numbers)."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    return text or None


def float_or_none(value: Any) -> float | None:
    """A numeric score, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class Call:
    """One request of a :class:`JsonSearch` provider: ``send``'s method, a path under the base
    URL, and its other keyword arguments (params, json, headers, follow_redirects)."""

    method: str
    path: str
    options: dict[str, Any] = field(default_factory=dict)


class JsonSearch(ABC):
    """A provider that answers one HTTP request with a JSON object: the steps every such
    provider takes, in the order that reports a missing key before anything is sent."""

    provider: ClassVar[HttpProvider]

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    def api_key(self) -> str:
        """The key the provider needs (raise ``missing_setting_error`` when it is unset); none by default."""
        return ""

    @abstractmethod
    def base_url(self) -> str:
        """The endpoint from settings (checked by :func:`check_base_url` afterwards)."""

    @abstractmethod
    def call(self, request: SearchRequest, api_key: str) -> Call:
        """The request for one query."""

    @abstractmethod
    def parse(self, query: str, payload: dict[str, Any]) -> SearchResponse:
        """The 200 answer's JSON object in our contract."""

    def error(self, response: httpx.Response) -> Exception:
        """A non-200 answer, sorted by the shared status rules (override for provider quirks)."""
        return http_error(self.provider, response)

    async def search(self, request: SearchRequest) -> SearchResponse:
        """Check the settings, send the call, sort a failure, parse the answer."""
        api_key = self.api_key()
        base_url = check_base_url(self.provider, self.base_url())
        call = self.call(request, api_key)
        response = await send(self.provider, call.method, f"{base_url}{call.path}",
                              timeout=self._settings.search_timeout_seconds, **call.options)
        if response.status_code != 200:
            raise self.error(response)
        return self.parse(request.query, json_object(self.provider, response))
