"""History size: how many bytes a run leaves in Temporal's history, with and without the claim-check store.

Run from the repository root: ``.venv/bin/python bench/history_size.py`` (about 2 minutes).

Why it is measured this way: Temporal caps a history at 50 MB and a payload at 2 MB, and every
byte of history is re-read on replay and on every cache miss, so size is a cost even far below
the caps. Two runs per store: a default run (3 steps, bundled corpus) and a crawl-heavy run where
search returns 20 loopback pages of about 1 MB each, which the researcher reads in full
(``max_search_results=20``, ``max_step_num=2``: both research steps find the same 20 pages).
Sizes are the sum of ``event.ByteSize()`` and the length of ``history.to_json()``; every payload
in every event is walked to find the largest one kept inline and to count claim-check references.
The default store (filesystem, threshold 32 KiB) is compared with ``DEERFLOW_PAYLOAD_STORE=none``.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness import (
    CRAWL_LOOPBACK,
    Stack,
    bench_stack,
    count_activities,
    header,
    html_page,
    is_reference,
    kib,
    page_index,
    payloads_in,
    run_main,
    serve_pages,
    timed_run,
    verdict,
)
from temporalio.client import WorkflowHistory

from offline.search_server import SearchIndex
from tests.support import QUESTION
from workflows.models import ResearchRequest

PAGES = 20
PAGE_BYTES = 1024 * 1024
DEFAULT_TARGET = 256 * 1024
CRAWL_TARGET = 1024 * 1024
INLINE_LIMIT = 256 * 1024


@dataclass(frozen=True)
class Size:
    label: str
    event_bytes: int
    json_bytes: int
    events: int
    largest_inline: int
    references: int
    crawls: tuple[int, int]  # crawl_tool activities (scheduled, completed)

    def line(self, target: int) -> str:
        ok = self.event_bytes <= target and self.largest_inline <= INLINE_LIMIT
        return (f"{self.label}: {kib(self.event_bytes)} in {self.events} events (JSON {kib(self.json_bytes)}), "
                f"largest inline payload {kib(self.largest_inline)}, {self.references} claim-check reference(s), "
                f"{self.crawls[1]}/{self.crawls[0]} crawls completed; target <= {kib(target)} "
                f"and no inline payload over {kib(INLINE_LIMIT)}: {verdict(ok)}")


def measure(label: str, history: WorkflowHistory) -> Size:
    payloads = [payload for event in history.events for payload in payloads_in(event)]
    inline = [payload.ByteSize() for payload in payloads if not is_reference(payload)]
    return Size(label, sum(event.ByteSize() for event in history.events), len(history.to_json()),
                len(history.events), max(inline, default=0), sum(1 for p in payloads if is_reference(p)),
                count_activities(history, "crawl_tool"))


async def two_runs(stack: Stack, store: str, crawl_index: SearchIndex) -> tuple[Size, Size]:
    default = ResearchRequest(question=QUESTION, auto_accept_plan=True)
    handle, _, _ = await timed_run(stack, default, f"size-default-{store}")
    plain = measure(f"default run, store={store}", await handle.fetch_history())
    default_index, stack.search.index = stack.search.index, crawl_index
    try:
        crawl = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=2, max_search_results=PAGES)
        handle, _, _ = await timed_run(stack, crawl, f"size-crawl-{store}")
        heavy = measure(f"crawl run ({PAGES} x 1 MB pages), store={store}", await handle.fetch_history())
    finally:
        stack.search.index = default_index
    return plain, heavy


async def main() -> None:
    header("History size")
    paths = [f"/page-{number}.html" for number in range(1, PAGES + 1)]
    pages = {path: html_page(f"Solid-state battery report {path}", PAGE_BYTES) for path in paths}
    results: list[tuple[Size, Size]] = []
    with serve_pages(pages) as base_url:
        for store in ("filesystem", "none"):
            async with bench_stack(worker_env={"DEERFLOW_PAYLOAD_STORE": store, **CRAWL_LOOPBACK}) as stack:
                results.append(await two_runs(stack, store, page_index(base_url, paths)))
    for plain, heavy in results:
        print(plain.line(DEFAULT_TARGET))
        print(heavy.line(CRAWL_TARGET))


if __name__ == "__main__":
    run_main(main())
