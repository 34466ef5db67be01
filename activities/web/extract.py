"""Extracting a fetched page's title and main text, in a killable child process on a budget.

Extraction runs in a child process that is killed at its budget and has CPU and memory rlimits
(:mod:`activities.support.isolated`), so no page can keep burning CPU after the activity gave up
on it, nor hold a thread the rest of the worker needs. What the child runs is
:mod:`activities.web.page_text`. Its linear pass (decoding, lxml) gets
:data:`PREPARE_BUDGET_SECONDS`; trafilatura (markdown) and pypdf are not linear, so they get
:data:`EXTRACT_BUDGET_SECONDS` (see :func:`extract_within_budget`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from activities.support.isolated import Limits, run_isolated
from activities.web.crawl_errors import failed
from activities.web.page_text import page_job, pdf_job

if TYPE_CHECKING:
    from activities.web.fetch import FetchedPage
    from config.settings import Settings

# Budgets in the child; module level so tests can shorten them. The linear pass (decode, lxml)
# takes ~2 s for 5 MB and is given 10 s; trafilatura or pypdf get 3 s.
PREPARE_BUDGET_SECONDS = 10.0
EXTRACT_BUDGET_SECONDS = 3.0


async def extract_within_budget(page: FetchedPage, max_chars: int, settings: Settings) -> tuple[str | None, str]:
    """(title, text) of a fetched page, extracted in a child process on a time budget.

    For HTML the child first sends the result of the cheap, linear pass (title and plain
    text), then trafilatura's markdown; trafilatura's cost grows faster than linearly on some
    markup (a 1 MB table takes over 10 s), so if it is over :data:`EXTRACT_BUDGET_SECONDS` the
    child is killed and the plain text is the answer. A PDF has no cheap fallback, so running
    over fails the crawl. Either way the child is gone when this returns.
    """
    if page.kind == "pdf":
        budget = EXTRACT_BUDGET_SECONDS
        outcome = await run_isolated(pdf_job, page.body, (max_chars,), [budget], Limits.for_budget(budget, settings))
        if outcome.timed_out_after is not None:
            raise failed(page.url, f"reading the PDF took longer than {budget:g} s")
        if outcome.error is not None:
            raise failed(page.url, f"the PDF could not be read ({outcome.error})")
        title, text = outcome.values[0]
        return title, text
    deadlines = [PREPARE_BUDGET_SECONDS] if page.kind == "text" else [PREPARE_BUDGET_SECONDS, EXTRACT_BUDGET_SECONDS]
    args = (page.charset, page.kind, page.url, max_chars)
    outcome = await run_isolated(page_job, page.body, args, deadlines, Limits.for_budget(sum(deadlines), settings))
    if not outcome.values:
        if outcome.timed_out_after is not None:
            raise failed(page.url, f"reading the page took longer than {outcome.timed_out_after:g} s")
        raise failed(page.url, f"the page could not be read ({outcome.error})")
    title, plain_text = outcome.values[0]
    markdown = outcome.values[1] if len(outcome.values) > 1 else None
    return title, markdown or plain_text
