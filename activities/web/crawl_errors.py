"""The crawl's three verdicts, as ``ApplicationError`` with an agent-readable message.

Shared by the fetch (:mod:`activities.web.fetch`) and the extraction
(:mod:`activities.web.extract`), so a refusal reads the same whichever stage made it:
``CrawlRefused`` (non-retryable: unsafe or unsuitable URL or content), ``CrawlFailed``
(non-retryable: 4xx, unknown host, bad TLS certificate, unreadable document) and
``CrawlUnavailable`` (retryable: connection failures, timeouts, 5xx, 408 and 429).
"""

from __future__ import annotations

import httpx
from temporalio.exceptions import ApplicationError

from activities.guards import url_guard


def refused(url: str | httpx.URL, reason: str) -> ApplicationError:
    """Unsafe or unsuitable: retrying cannot help, so non-retryable."""
    return ApplicationError(
        f"Refused to crawl {url_guard.display_url(url)}: {reason}", type="CrawlRefused", non_retryable=True
    )


def failed(url: str | httpx.URL, reason: str) -> ApplicationError:
    """The page is there but cannot be had (4xx, unreadable): non-retryable."""
    return ApplicationError(
        f"Could not crawl {url_guard.display_url(url)}: {reason}", type="CrawlFailed", non_retryable=True
    )


def unavailable(url: str | httpx.URL, reason: str) -> ApplicationError:
    """Probably transient (network, timeout, 5xx): Temporal may retry."""
    return ApplicationError(
        f"Could not crawl {url_guard.display_url(url)} right now: {reason}",
        type="CrawlUnavailable",
        non_retryable=False,
    )
