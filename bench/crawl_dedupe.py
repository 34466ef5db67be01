"""Crawl dedupe: pages the model asks for again within a run are fetched once.

Run from the repository root: ``.venv/bin/python bench/crawl_dedupe.py`` (under a minute).

Why it is measured this way: every research step of a run searches the same topic, so steps keep
finding, and asking to read, the same pages. Here the search corpus is 3 loopback pages that
every search returns, and ``max_step_num=4`` gives 3 research steps, each of which asks to crawl
all 3. The crawl_tool calls the model made are counted at the model server (its scripted replies
to the recorded requests, which are deterministic); the crawl_tool activities are counted in the
run's history. Run once with steps in order and once with ``parallel_steps``, where the same
page is asked for by concurrent steps at the same moment.
"""

from __future__ import annotations

from harness import (
    CRAWL_LOOPBACK,
    Stack,
    bench_stack,
    count_activities,
    header,
    html_page,
    page_index,
    run_main,
    serve_pages,
    timed_run,
    verdict,
)

from offline.scripted_agents import respond
from tests.support.runs import QUESTION
from workflows.contracts.research import ResearchRequest

PAGES = 3


def model_crawl_calls(stack: Stack) -> int:
    """crawl_tool calls in the model's replies to every request it received so far."""
    return sum(1 for body in list(stack.model.requests)
               for call in respond(body).tool_calls if call.name == "crawl_tool")


async def one_run(stack: Stack, parallel: bool) -> tuple[int, int, int]:
    stack.model.requests.clear()
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=4, parallel_steps=parallel)
    handle, _, _ = await timed_run(stack, request, "dedupe")
    return model_crawl_calls(stack), *count_activities(await handle.fetch_history(), "crawl_tool")


async def main() -> None:
    header("Crawl dedupe")
    paths = [f"/article-{number}.html" for number in range(1, PAGES + 1)]
    with serve_pages({path: html_page(f"Article {path}", 20_000) for path in paths}) as base_url:
        async with bench_stack(worker_env=CRAWL_LOOPBACK) as stack:
            stack.search.index = page_index(base_url, paths)
            rows = [(mode, *await one_run(stack, parallel)) for mode, parallel in
                    (("steps in order", False), ("parallel_steps", True))]
    for mode, calls, activities, completed in rows:
        saved = calls - activities
        print(f"{mode}: model asked for {calls} crawls of {PAGES} distinct pages; {activities} crawl_tool "
              f"activities ran ({completed} completed); {saved} saved ({saved / calls:.0%}); "
              f"at most one fetch per page: {verdict(activities <= PAGES)}")


if __name__ == "__main__":
    run_main(main())
