"""Our page as the people who use it read it (issue #49 §2), in headless Chromium at 1280 and 390 px:
each run has an address, the page speaks in words and not the workflow's names, the list says what
the run view says, a viewer is offered nothing it may not do and everyone sees who they are signed
in as, and the smaller points (the icon, an empty documents box, the budget hints, an unpriced
model's cost, table headers on a phone).

Stand-in runs (tests/support/stand_in_runs.py) on the module's dev server; no research worker.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from config.settings import load_settings
from tests.support.cdp import Page, chromium_path
from tests.support.runs import SAMPLE_REPORT
from tests.support.stand_in_runs import StartStandIn
from tests.support.web_server import api_server
from workflows.research.findings import finding_preview

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(120),
]
WIDTHS = [1280, 390]
SCREENSHOTS = Path("/tmp/our-page")
QUESTION = "How much power do tidal stream turbines produce?"
TOKENS = {"ada": "ada-token-0123456789abcdef", "vera": "vera-token-0123456789abcdef"}
STARTED = "window.deerflowPage !== undefined && window.deerflowPage.started"
RESTATED_FINDING = ("## Problem Statement\n\n" + "The step, restated at length. " * 12 + "\n\n## Findings\n\n"
                    "- Tidal stream turbines produce 6 MW [EMEC](https://www.emec.org.uk/).\n\n## Conclusion\n\nok")
INTERNAL_NAMES = ("awaiting_review", "plan_feedback", "background_investigation", "awaiting ", "Phase:")


@pytest.fixture(scope="module")
async def guarded(client: Client) -> AsyncIterator[str]:
    """The API server with two named tokens: an admin and a viewer."""
    named = [{"name": "ada", "token": TOKENS["ada"], "role": "admin"},
             {"name": "vera", "token": TOKENS["vera"], "role": "viewer"}]
    settings = load_settings(environ={"DEERFLOW_WEB_TOKENS": json.dumps(named)})
    async with api_server(client, settings) as url:
        yield url


async def opened(page: Page, url: str, width: int) -> None:
    await page.use_width(width)
    await page.navigate(url)
    await page.wait_for(STARTED, 30, what="the page")


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_run_has_an_address_that_reload_and_links_keep(open_api: str, stand_in: StartStandIn, page: Page,
                                                               width: int) -> None:
    handle = await stand_in("", question=QUESTION)
    other = await stand_in(SAMPLE_REPORT, question="What will tidal power deliver by 2030?")
    await opened(page, f"{open_api}/", width)
    row = f"[...document.querySelectorAll('#runs li')].find((li) => li.title === {json.dumps(handle.id)})"
    link = await page.wait_for(f"{row}?.querySelector('a')?.getAttribute('href')", 20, what="the run's link")
    assert link == f"/runs/{handle.id}"
    await page.press(f"#runs li[data-run='{handle.id}'] a")
    await page.wait_for(f"location.pathname === {json.dumps(link)} && "
                        "document.getElementById('run-title').textContent === " + json.dumps(QUESTION),
                        what="the run opened at its address")
    await page.navigate(f"{open_api}{link}")  # a reload, or the link shared with someone
    await page.wait_for(STARTED, 30, what="the page again")
    assert await page.wait_for("window.deerflowPage.state.run", what="the run") == handle.id
    await page.evaluate(f"window.deerflowPage.openRun({json.dumps(other.id)}); true")
    await page.wait_for(f"location.pathname === {json.dumps(f'/runs/{other.id}')}", what="the other's address")
    await page.evaluate("history.back(); true")  # back to the first run
    await page.wait_for(f"window.deerflowPage.state.run === {json.dumps(handle.id)}", what="back to the first run")
    legacy = await stand_in("", question=QUESTION)  # the page's addresses before: ?run=ID
    await page.navigate(f"{open_api}/?run={legacy.id}")
    await page.wait_for(f"location.pathname === {json.dumps(f'/runs/{legacy.id}')}", what="the old address moved")
    for run in (handle, other, legacy):
        await run.cancel() if run is not other else None


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_page_speaks_in_words_and_the_list_says_what_the_view_says(
        open_api: str, stand_in: StartStandIn, page: Page, width: int) -> None:
    handle = await stand_in("", question=QUESTION)
    await opened(page, f"{open_api}/runs/{handle.id}", width)
    said = await page.wait_for("document.getElementById('run-phase').textContent", 30, what="the phase")
    assert said == "Now: waiting for a review of its plan", said
    # In the same moment, not at the list's next refresh.
    row = (f"[...document.querySelectorAll('#runs li')].find((li) => li.title === {json.dumps(handle.id)})"
           "?.querySelector('.phase').textContent")
    listed = await page.wait_for(row, 20, what="the run in the list")
    assert listed.startswith("waiting for a review of its plan · "), listed
    text = await page.evaluate("document.body.innerText")
    assert not [name for name in INTERNAL_NAMES if name in text], text
    words = await page.evaluate("""(() => { const p = window.deerflowPage;
        const say = (phase, steps) => p.phaseWords({phase, steps});
        return [say('background_investigation'), say('researching', [{state: 'done'}, {state: 'running'},
                {state: 'pending'}]), say('awaiting_budget')]; })()""")
    assert words == ["searching for background", "researching: step 2 of 3",
                     "paused at its budget, waiting for a decision"], words
    # Once the report is shown, a run still closing is not "writing the report".
    closing = await page.evaluate("""(() => { const p = window.deerflowPage; const status = {phase: 'reporting'};
        p.state.report = '# done'; p.state.lastStatus = status; return p.phaseWords(status); })()""")
    assert closing == "report written, finishing"
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / f"words-{width}.png")
    await handle.cancel()


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_viewer_is_offered_nothing_it_may_not_do_and_everyone_sees_who_they_are(
        guarded: str, stand_in: StartStandIn, page: Page, width: int) -> None:
    handle = await stand_in("", question=QUESTION)
    for name, may in (("vera", False), ("ada", True)):
        await page.use_width(width)
        await page.navigate(f"{guarded}/runs/{handle.id}")
        await page.evaluate(f"sessionStorage.setItem('deerflow-token', {json.dumps(TOKENS[name])}); true")
        await page.navigate(f"{guarded}/runs/{handle.id}")
        await page.wait_for(STARTED, 30, what="the page")
        role = "viewer" if name == "vera" else "admin"
        assert await page.wait_for("document.getElementById('signed-in').textContent", 20,
                                   what="who is signed in") == f"Signed in as {name} ({role})"
        await page.wait_for("document.getElementById('run-phase').textContent.startsWith('Now:')", 30,
                            what="the run's phase")
        await page.wait_for("document.getElementById('plan-title').textContent", 20, what="the plan")
        shown = await page.evaluate("[!document.getElementById('new-run').hidden, "
                                    "!document.getElementById('review').hidden, "
                                    "!document.getElementById('cancel-run').hidden, "
                                    "!document.getElementById('read-only').hidden]")
        assert shown == [may, may, may, not may], (name, shown)
        SCREENSHOTS.mkdir(exist_ok=True)
        await page.screenshot(SCREENSHOTS / f"signed-in-{name}-{width}.png")
    await handle.cancel()


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_smaller_points(open_api: str, stand_in: StartStandIn, page: Page, width: int) -> None:
    async with httpx.AsyncClient() as http:
        icon = await http.get(f"{open_api}/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    wide = SAMPLE_REPORT + "\n| Commissioned | Operator | Capacity (MW) | Grid connection |\n|---|---|---|---|\n" \
                           "| 2016 | SIMEC Atlantis Energy | 6 | subsea export cables |\n"
    handle = await stand_in(wide, question="What will tidal power deliver by 2030?")
    await handle.result()
    await opened(page, f"{open_api}/runs/{handle.id}", width)
    await page.wait_for("!document.getElementById('flows').hidden", 30, what="the report")
    # No documents: the box is replaced by a hint; empty budgets say what the operator's default is.
    assert await page.evaluate("document.getElementById('resources').hidden && "
                               "!document.getElementById('resources-hint').hidden")
    assert await page.evaluate("[document.getElementById('token-budget').placeholder, "
                               "document.getElementById('cost-budget').placeholder]") == [
        "none by default", "none by default"]
    # An unpriced model: its cost is unknown, not "$0.0000".
    line = await page.evaluate("""(() => { window.deerflowPage.showBudget({awaiting: null, budget: {tokens: 7000,
        cost_usd: null, expected_next_step: null, cut_short: false}, budget_standing: {spent_tokens: 5000,
        remaining_tokens: 2000, spent_usd: 0, remaining_usd: null, unpriced_models: ['offline-model']},
        events: [], decisions: []}, true); return document.getElementById('budget-line').textContent; })()""")
    assert "$0.0000" not in line and "cost unknown: no price for offline-model" in line, line
    # Table headers keep their words whole (the table scrolls in its box on a phone).
    broken = await page.evaluate("""[...document.querySelectorAll('#report th')].filter((th) => {
        const line = parseFloat(getComputedStyle(th).lineHeight) || 20;
        return th.getBoundingClientRect().height > 2 * line; }).map((th) => th.textContent)""")
    assert broken == [], broken
    # Downloads are named by the question.
    assert await page.evaluate("window.deerflowPage.fileStem()") == "what-will-tidal-power-deliver-by-2030"
    # A step's finding preview, as the run's status gives it, shows the findings, not the step restated.
    preview = finding_preview(RESTATED_FINDING)
    shown = await page.evaluate(f"""(() => {{ window.deerflowPage.showPlan({{plan: {{title: 'Tidal power',
        thought: '', steps: [{{title: 'Output', description: 'How much'}}]}}, plan_history: [],
        steps: [{{state: 'done', finding_preview: {json.dumps(preview)}}}]}}, false);
        return document.querySelector('#plan-steps .finding').innerText; }})()""")
    assert shown.startswith("Findings") and "Tidal stream turbines produce 6 MW" in shown, shown
    assert "Problem Statement" not in shown and "restated" not in shown, shown
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / f"smaller-points-{width}.png")
