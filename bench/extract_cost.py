"""Extraction cost: what running page extraction in a killable child process costs per page.

Run from the repository root: ``.venv/bin/python bench/extract_cost.py`` (under a minute).

Why it is measured this way: the crawler used to extract in threads of the default executor
(decode, lxml pass and trafilatura, each a ``to_thread`` hop), which cannot be stopped when a
page runs over its budget. It now forks a child from a fork server per page
(``activities/support/isolated.py``). The difference per page is the fork, the pipe round trips and the
child's exit, so the same article-like pages go through both paths, warm, in turns, and the
medians are compared. The fork server's one-off start (it imports trafilatura, lxml and pypdf)
is timed separately, since a worker pays it once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from harness import header, html_page, median, ms, run_main

from activities.web.decode import decode_body
from activities.web.extract import extract_within_budget
from activities.web.fetch import FetchedPage
from activities.web.page_text import prepare_html, trafilatura_markdown
from config.settings import load_settings

ROUNDS = 20
MAX_CHARS = 20_000
SETTINGS = load_settings()  # the child's limits, as the worker's


async def in_threads(page: FetchedPage) -> tuple[str | None, str]:
    """The former path: the same steps, each in the default executor."""
    text = await asyncio.to_thread(decode_body, page.body, page.charset)
    prepared = await asyncio.to_thread(prepare_html, text, MAX_CHARS)
    markdown = await asyncio.to_thread(trafilatura_markdown, prepared.markup, page.url)
    return prepared.title, markdown or prepared.plain_text


async def in_child(page: FetchedPage) -> tuple[str | None, str]:
    """The current path."""
    return await extract_within_budget(page, MAX_CHARS, SETTINGS)


async def timed(extract: Callable[[FetchedPage], Awaitable[tuple[str | None, str]]], page: FetchedPage) -> float:
    started = time.perf_counter()
    await extract(page)
    return time.perf_counter() - started


async def main() -> None:
    header("Extraction cost, threads vs child process")
    small = FetchedPage("http://127.0.0.1/a", "html", "utf-8", html_page("Solid-state batteries", 20_000))
    large = FetchedPage("http://127.0.0.1/b", "html", "utf-8", html_page("Solid-state batteries", 200_000))
    started = time.perf_counter()
    await in_child(small)
    print(f"first child (starts the fork server): {ms(time.perf_counter() - started)}")
    for name, page in (("20 KB page", small), ("200 KB page", large)):
        threads, children = [], []
        for _ in range(ROUNDS):
            threads.append(await timed(in_threads, page))
            children.append(await timed(in_child, page))
        print(f"{name}: threads median {ms(median(threads))}, child process median {ms(median(children))} "
              f"(+{ms(median(children) - median(threads))}), {ROUNDS} rounds each")


if __name__ == "__main__":
    run_main(main())
