"""The ``crawl_tool`` activity: fetch one web page or PDF, safely, and return it as markdown.

The URL comes from a language model, so every stage treats the page as hostile. The stages are
modules of their own:

* :mod:`activities.web.fetch`: the SSRF guard on every URL and redirect, the connection pinned
  to the validated address, one deadline over the whole fetch, the size caps and the content
  checks;
* :mod:`activities.web.decode`: the body's ``Content-Encoding``, decoded with its output counted
  (so a decompression bomb stops at the cap), and its charset;
* :mod:`activities.web.extract`: title and main text, in a killable child process on a budget.

Errors are ``ApplicationError`` with an agent-readable message and one of three types
(:mod:`activities.web.crawl_errors`): ``CrawlRefused`` (non-retryable: unsafe or unsuitable URL
or content), ``CrawlFailed`` (non-retryable: 4xx, unknown host, bad TLS certificate, unreadable
document) and ``CrawlUnavailable`` (retryable: connection failures, timeouts, 5xx, 408 and 429).
"""

from __future__ import annotations

from temporalio import activity

from activities.support.limits import provider_slot
from activities.support.retry_pacing import paced_retries
from activities.support.tool_metrics import count_crawl_bytes
from activities.web.extract import extract_within_budget
from activities.web.fetch import fetch
from config.settings import Settings
from runtime.heartbeat import heartbeating
from workflows.contracts.tool_activities import CrawlRequest, CrawlResult


class CrawlActivities:
    """``crawl_tool``, built with the worker's settings (allowed hosts, caps, extraction limits)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name="crawl_tool")
    @heartbeating
    @paced_retries
    async def crawl_tool(self, request: CrawlRequest) -> CrawlResult:
        """Fetch ``request.url`` behind the SSRF guards and return its main content as markdown.

        The markdown is capped to ``crawl_max_chars`` here, before it is returned, so an
        oversized page never enters workflow history. Heartbeats run in the background because
        the workflow schedules this activity with a heartbeat timeout shorter than the fetch
        deadline.
        """
        settings = self.settings
        async with provider_slot("crawl", settings.crawl_max_concurrency):
            page = await fetch(request.url, settings.crawl_allow_hosts)
        count_crawl_bytes(len(page.body))
        title, text = await extract_within_budget(page, settings.crawl_max_chars, settings)
        markdown, truncated = cut_at_break(text, settings.crawl_max_chars)
        return CrawlResult(url=page.url, title=title, markdown=markdown, truncated=truncated)


def cut_at_break(text: str, max_chars: int) -> tuple[str, bool]:
    """Cut ``text`` to ``max_chars`` (at a line or word break when one is near); say if cut.

    Unlike search's ``cap_text`` it adds no marker: the result's ``truncated`` flag says so."""
    text = text.strip()
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars]
    for sep in ("\n", " "):
        at = cut.rfind(sep)
        if at >= max_chars * 0.8:
            cut = cut[:at]
            break
    return cut.rstrip(), True
