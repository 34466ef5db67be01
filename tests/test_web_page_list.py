"""Our page's list of runs with a few hundred of them, in headless Chromium (issue #46 §3): it shows
50 at a time, More runs goes on through the server's visibility until the last, and the filter form
narrows it by question words, where a run stands and who started it, through the same index.

Stand-in runs (tests/support/stand_in_runs.py) carry what real starters index (question, starter)
and upsert their phase as real runs do; no research worker is needed. Each test's runs carry a
word of their own in their questions, so the filters find only them on the shared dev server.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHandle

from tests.support.cdp import Page, chromium_path
from tests.support.stand_in_runs import StartStandIn
from workflows.contracts.decisions import Actor, Via

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(600),
]
SCREENSHOTS = Path("/tmp/our-page")
FINISHED, PAUSED = 160, 80  # runs of the test: finished, and waiting for a plan review
ANN = Actor(name="ann", via=Via.API)
MAX_PAGES = 12  # more than the test's runs fill (a list that never ends fails)
LISTED = "[...document.querySelectorAll('#runs li')].map((li) => li.dataset.run)"


async def many(stand_in: StartStandIn, tag: str) -> tuple[list[WorkflowHandle], list[WorkflowHandle]]:
    """FINISHED runs that finished and PAUSED that wait, every third one started by ann."""
    gate = asyncio.Semaphore(16)

    async def one(number: int, report: str) -> WorkflowHandle:
        async with gate:
            return await stand_in(report, question=f"Tidal stream power, {tag} number {number}?",
                                  started_by=ANN if number % 3 == 0 else Actor(name="stand-in", via=Via.API))

    finished = await asyncio.gather(*(one(number, "# Report\n\nDone.") for number in range(FINISHED)))
    paused = await asyncio.gather(*(one(FINISHED + number, "") for number in range(PAUSED)))
    return list(finished), list(paused)


async def indexed(client: Client, query: str, expected: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while (found := (await client.count_workflows(query)).count) != expected:
        assert time.monotonic() < deadline, f"{found} runs match {query}, not {expected}"
        await asyncio.sleep(0.5)


async def filter_by(page: Page, question: str, state: str = "", started_by: str = "") -> list[str]:
    """Fill the form, send it and page through with More runs to the last; the ids listed, in order."""
    await page.evaluate(f"""(() => {{
        document.getElementById('filter-question').value = {json.dumps(question)};
        document.getElementById('filter-state').value = {json.dumps(state)};
        document.getElementById('filter-started-by').value = {json.dumps(started_by)};
        window.wantedFilter = window.deerflowPage.listFilter().toString(); return true; }})()""")
    await page.press("#run-filter button[type=submit]")
    shown = (await page.wait_for(f"document.getElementById('runs').dataset.filter === window.wantedFilter && "
                                 f"{{ids: {LISTED}}}", 60, what="the filtered list"))["ids"]
    assert len(shown) <= 50
    for _ in range(MAX_PAGES):
        if await page.evaluate("document.getElementById('more-runs').hidden"):
            break
        await page.press("#more-runs")
        shown = await page.wait_for(f"(() => {{ const ids = {LISTED}; return ids.length > {len(shown)} && ids; }})()",
                                    60, what="the next page")
    else:
        raise AssertionError(f"More runs still offered after {MAX_PAGES} pages")
    return list(shown)


async def test_the_list_pages_and_filters_a_few_hundred_runs(client: Client, open_api: str, stand_in: StartStandIn,
                                                            page: Page) -> None:
    tag = f"zq{uuid.uuid4().hex[:8]}"
    finished, paused = await many(stand_in, tag)
    await indexed(client, f"DeerFlowQuestion = '{tag}' AND DeerFlowPhase = 'completed'", FINISHED)
    await indexed(client, f"DeerFlowQuestion = '{tag}' AND DeerFlowAwaiting = 'plan_feedback'", PAUSED)
    await page.navigate(f"{open_api}/")
    await page.wait_for("window.deerflowPage !== undefined && window.deerflowPage.started", 60, what="the page")

    every = await filter_by(page, tag)
    assert len(every) == len(set(every)) == FINISHED + PAUSED  # every run once, none twice across pages
    assert set(every) == {handle.id for handle in finished + paused}
    # Newest first within each kind: the server lists running runs first, then by when they ended.
    assert set(every[:PAUSED]) == {handle.id for handle in paused}

    waiting = await filter_by(page, tag, state="awaiting=plan_feedback")
    assert sorted(waiting) == sorted(handle.id for handle in paused)
    assert await page.evaluate("[...document.querySelectorAll('#runs li')].every((li) => "
                               "li.classList.contains('awaiting'))")
    anns = await filter_by(page, f"{tag} number", started_by="ann")
    assert sorted(anns) == sorted(handle.id for number, handle in enumerate(finished + paused) if number % 3 == 0)
    assert await page.evaluate("[...document.querySelectorAll('#runs li .phase')].every((e) => "
                               "e.textContent.includes('ann (api)'))")
    # Words that close the literal and widen the query are words of a question, matched as such.
    assert await filter_by(page, f"{tag} x') OR (WorkflowId != '') --") == []
    assert await page.evaluate("!document.getElementById('runs-none').hidden")
    # An unfiltered list after the filters: 50 of every run on the server, and More runs to go on.
    assert len(await filter_by(page, "")) >= FINISHED + PAUSED
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / "list-paged.png")
    for handle in paused:
        await handle.cancel()
