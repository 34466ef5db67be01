"""Our page's budget controls in headless Chromium, on real runs (issue #26, item 1): a run started
from the page with a budget pauses at it, the page shows spent, remaining and what the rest is
expected to cost, and its buttons raise the budget, finish now and cancel through the API.

A real ``worker.py`` process serves the runs with the offline model, priced at one USD per million
tokens each way. The budget keeps the report's reserve (some 9,000 tokens) free, so a token budget
of 7,000 or a cost budget of $0.007 is crossed before the first step, and one of 14,000 before the
second (tests/test_budget.py).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from config.settings import load_settings
from tests.support.cdp import Page, chromium_path
from tests.support.processes import DevServer, query_status, start_worker
from tests.support.web_server import api_server

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(240),
]
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
PRICED = json.dumps({"deerflow-offline-demo": {"input": 1, "output": 1}})
PAUSED = "!document.getElementById('budget').hidden"
REPORT_TEXT = "document.getElementById('report').innerText"
SHOTS = Path("/tmp/our-page")


@pytest.fixture(scope="module")
async def base(dev_server: DevServer, client: Client, tmp_path_factory: pytest.TempPathFactory,
               ) -> AsyncIterator[str]:
    log = tmp_path_factory.mktemp("budget-worker") / "worker.log"
    process = await start_worker(dev_server, client, log, DEERFLOW_MODEL_PRICES=PRICED)
    try:
        async with api_server(client, load_settings().model_copy(update={"web_token": None})) as url:
            yield url
    finally:
        process.stop()


@pytest.fixture
async def page(page: Page, base: str) -> Page:
    """The session's page, on our page with its scripts started."""
    await page.navigate(f"{base}/")
    await page.wait_for("window.deerflowPage !== undefined && window.deerflowPage.started", what="the page's scripts")
    return page


@contextlib.asynccontextmanager
async def status_on_failure(page: Page, tmp_path: Path) -> AsyncIterator[None]:
    """On a failure: a screenshot, and the run's status as the page last read it."""
    try:
        yield
    except Exception:
        await page.screenshot(tmp_path / "failure.png")
        print("STATUS", json.dumps(await page.evaluate("window.deerflowPage.state.lastStatus"))[:6000])
        raise


async def start_paused(page: Page, tokens: str = "", cost: str = "") -> tuple[str, str]:
    """Start a run from the page's form with these budgets, plans accepted; once it pauses at its
    budget: its id and what the page says about the pause."""
    await page.evaluate(f"document.getElementById('token-budget').value = {json.dumps(tokens)}; "
                        f"document.getElementById('cost-budget').value = {json.dumps(cost)}; "
                        "document.getElementById('auto-accept').checked = true; true")
    await page.type_into("#question", QUESTION)
    await page.press("#new-run button[type=submit]")
    run = await page.wait_for("window.deerflowPage.state.run", what="the run to start")
    shown = await page.wait_for(f"{PAUSED} && document.getElementById('budget-expected').textContent", 90,
                                what="the pause at the budget")
    return run, shown


async def test_raise_from_the_page_runs_the_rest_and_the_report_says_what_was_spent(
        page: Page, dev_server: DevServer, tmp_path: Path) -> None:
    try:
        run, shown = await start_paused(page, tokens="7000")
        assert "of 7,000 tokens spent" in shown and "Finishing now, the report is expected" in shown, shown
        assert "$" in await page.evaluate("document.getElementById('budget-line').textContent")
        await page.type_into("#budget-tokens", "1000000")
        await page.press("#budget-raise-form button[type=submit]")
        await page.wait_for("document.getElementById('budget-message').textContent.includes('raise to 1,000,000')",
                            what="the raise taken")
        report = await page.wait_for(f"{REPORT_TEXT}.includes('Budget:') && {REPORT_TEXT}", 90, what="the report")
        assert "of 1,000,000 tokens spent" in report and "not cut short" in report, report
        status = query_status(dev_server, run)
        assert [(d["kind"], d["decision"], d["by"]["via"]) for d in status["decisions"]] == [
            ("budget", "raise to 1,000,000 tokens", "api")]
    except Exception:
        await page.screenshot(tmp_path / "failure.png")
        # What the run itself says, to tell a stalled run from a page that stopped following it (it
        # failed once this way in a full suite at nice 15 beside two busy loops, and never alone).
        started = await page.evaluate("window.deerflowPage.state.run")
        if started:
            print("the run's status at the failure:", json.dumps(query_status(dev_server, started))[:4000])
        raise


async def test_finish_now_from_the_page_reports_what_was_found_cut_short(page: Page, tmp_path: Path) -> None:
    try:
        _, shown = await start_paused(page, cost="0.007")
        assert "of $0.0070 spent" in shown and "(no token budget)" in shown, shown
        await page.press("#budget-finish")
        report = await page.wait_for(f"{REPORT_TEXT}.includes('Budget:') && {REPORT_TEXT}", 90, what="the report")
        assert "cut short by the cost budget" in report and "written from what was found" in report.split("Budget:")[1]
        steps = await page.evaluate("[...document.querySelectorAll('#plan-steps li')].map((li) => li.innerText)")
        assert any("pending" in step for step in steps), "the rest of the plan never ran"
    except Exception:
        await page.screenshot(tmp_path / "failure.png")
        raise


async def test_cancel_from_the_page_ends_the_run(page: Page, tmp_path: Path) -> None:
    try:
        run, _ = await start_paused(page, tokens="7000")
        await page.press("#budget-cancel")
        await page.press("#cancel-yes")  # it asks first, as every Cancel on the page does
        ended = await page.wait_for("document.getElementById('run-phase').textContent.startsWith('Ended') && "
                                    "document.getElementById('run-phase').textContent", 60, what="the run to end")
        assert "cancel" in ended, ended
        assert await page.evaluate(PAUSED.replace("!", "")), "no controls on an ended run"
        # The list reads how it ended from the server, as the run view does: it said "finished" (issue #49).
        await page.press("#refresh")
        entry = f"document.querySelector('#runs li[data-run={json.dumps(run)}] .phase')?.textContent"
        listed = await page.wait_for(f"{entry}?.startsWith('cancelled') && {entry}", 30, what="the list's word")
        assert "finished" not in listed, listed
    except Exception:
        await page.screenshot(tmp_path / "failure.png")
        raise


@pytest.mark.parametrize("width", [1280, 390])
async def test_a_raise_that_is_not_enough_shows_the_new_budget_and_when_it_paused_again(
        page: Page, tmp_path: Path, width: int) -> None:
    await page.use_width(width)
    async with status_on_failure(page, tmp_path):
        _, shown = await start_paused(page, tokens="7000")
        assert "of 7,000 tokens spent" in shown and not await page.evaluate(
            "document.getElementById('budget-again').hidden === false"), shown
        await page.type_into("#budget-tokens", "9000")  # not enough for the next step either
        await page.press("#budget-raise-form button[type=submit]")
        again = await page.wait_for(f"{PAUSED} && !document.getElementById('budget-again').hidden && "
                                    "document.getElementById('budget-again').textContent", 90,
                                    what="the second pause")
        assert again.startswith("Paused again at ") and "raise to 9,000 tokens" in again, again
        banner = await page.evaluate("document.getElementById('budget-expected').textContent")
        assert "of 9,000 tokens spent" in banner and "of 7,000" not in banner, banner
        # The first decision's message is gone, and the inputs are empty for the next one.
        assert await page.evaluate("[document.getElementById('budget-message').textContent, "
                                   "document.getElementById('budget-tokens').value]") == ["", ""]
        await page.screenshot(Path("/tmp/our-page") / f"budget-paused-again-{width}.png")
        await page.press("#budget-finish")
        await page.wait_for(f"{REPORT_TEXT}.includes('Budget:')", 90, what="the report")


@pytest.mark.parametrize("width", [1280, 390])
async def test_the_banner_says_what_a_step_and_finishing_now_are_expected_to_cost(
        page: Page, tmp_path: Path, width: int) -> None:
    """Before any step has finished the run knows no step's cost: the banner said "the next step is
    expected to cost 0 tokens ($0.0000)". It says so, and what finishing now costs (issue #48 item 3's
    reserve, said by the CLI already), and that finishing now goes over where it would."""
    await page.use_width(width)
    SHOTS.mkdir(exist_ok=True)
    in_view = "document.getElementById('budget').scrollIntoView(); true"
    async with status_on_failure(page, tmp_path):
        _, first = await start_paused(page, tokens="7000")
        assert "No step has finished yet, so what a step costs is not known." in first, first
        assert "cost 0 tokens" not in first and "($0.0000)" not in first, first
        report = re.search(r"Finishing now, the report is expected to cost at most ([\d,]+) tokens \(\$([\d.]+)\)"
                           r", more than the budget has left: it would go over\.", first)
        assert report is not None and int(report[1].replace(",", "")) > 4000, first  # 7,000 less what was spent
        await page.evaluate(in_view)
        await page.screenshot(SHOTS / f"budget-before-any-step-{width}.png")
        await page.type_into("#budget-tokens", "14000")  # the first step runs; the second would cross it
        await page.press("#budget-raise-form button[type=submit]")
        await page.wait_for(f"{PAUSED} && !document.getElementById('budget-again').hidden", 90,
                            what="the pause before the second step")
        second = await page.evaluate("document.getElementById('budget-expected').textContent")
        step = re.search(r"The next step is expected to cost ([\d,]+) tokens \(\$([\d.]+)\), the rest of the plan "
                         r"([\d,]+) tokens \(\$([\d.]+)\)\. Finishing now, the report is expected to cost at most "
                         r"[\d,]+ tokens \(\$[\d.]+\)\.$", second)
        assert step is not None and int(step[1].replace(",", "")) > 0 and float(step[2]) > 0, second
        assert "it would go over" not in second, "the reserve was kept: the report fits"
        await page.evaluate(in_view)
        await page.screenshot(SHOTS / f"budget-after-a-step-{width}.png")
        await page.press("#budget-finish")
        await page.wait_for(f"{REPORT_TEXT}.includes('Budget:')", 90, what="the report")


@pytest.mark.parametrize("width", [1280, 390])
async def test_start_research_takes_the_reader_to_the_plan(page: Page, tmp_path: Path, width: int) -> None:
    await page.use_width(width)
    await page.type_into("#question", QUESTION)
    await page.evaluate("document.getElementById('auto-accept').checked = false; "
                        "document.querySelector('#new-run button[type=submit]').scrollIntoView(); true")
    await page.press("#new-run button[type=submit]")
    run = await page.wait_for("window.deerflowPage.state.run", what="the run to start")
    assert run.startswith("deerflow-web-page-what-are-the-prospects-of-"), run  # named by its question
    await page.wait_for("!document.getElementById('review').hidden", 90, what="the plan to await review")
    # Scrolled to its top, the plan may sit a fraction of a pixel above the viewport (-0.125 beside a
    # long list of runs at 1280 px).
    top = await page.wait_for("(() => { const t = document.getElementById('plan').getBoundingClientRect().top;"
                              " return t > -1 && t < innerHeight * 0.8 ? String(t) : null; })()", 10,
                              what="the plan in view")
    assert float(top) > -1
    await page.screenshot(Path("/tmp/our-page") / f"start-to-plan-{width}.png")
    await page.press("#cancel-ask")
    await page.press("#cancel-yes")
