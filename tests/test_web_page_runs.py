"""Our page in headless Chromium, around its runs: how a run ended, a run whose status request failed,
the list of runs, a phone, and Cancel (asked first, at 1280 and 390 px).

Stand-in runs (tests/support/stand_in_runs.py) on the module's dev server: one that awaits a plan
review until it is cancelled, terminated, failed or timed out, and one that finishes with a wide
report. No research worker: nothing here needs one.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError

from tests.support.cdp import PHONE, STATUS_REQUEST, WIDTHS, Page, chromium_path, off_screen
from tests.support.runs import SAMPLE_REPORT
from tests.support.stand_in_runs import FAILURE, StandInRun, StartStandIn

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(120),
]
SCREENSHOTS = Path("/tmp/our-page")  # kept outside pytest's tmp dir for a person to look at
WIDE_REPORT = SAMPLE_REPORT + """
| Site | Country | Capacity (MW) | Turbines | Operator | Commissioned | Notes on the grid connection |
|---|---|---|---|---|---|---|
| MeyGen | United Kingdom | 6 | 4 | SIMEC Atlantis Energy | 2016 | subsea export cables to the Ness of Quoys |

A long address: https://example.org/a/very/long/path/that/does/not/break/anywhere/on/its/own/0123456789abcdef

```
print("a code line that is far wider than a phone's screen, and must scroll in its own box")
```
"""


def shown(element: str) -> str:
    return f"!document.getElementById('{element}').hidden"


async def what_was_said(page: Page, open_api: str, handle: WorkflowHandle) -> str:
    """The page's phase and error lines, its API's answer for the run, and the run's history events."""
    lines = await page.evaluate("['run-phase', 'run-error'].map((id) => document.getElementById(id).textContent)")
    async with httpx.AsyncClient(timeout=30) as http:
        answer = (await http.get(f"{open_api}/api/runs/{handle.id}")).text[:1500]
    events = [EventType.Name(event.event_type) for event in (await handle.fetch_history()).events]
    return f"page {lines}; API {answer}; history {events}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("ending", ["cancelled", "terminated", "failed", "timed out"])
async def test_an_ended_run_says_how_and_offers_no_review(open_api: str, stand_in: StartStandIn, page: Page,
                                                          ending: str, width: int) -> None:
    handle = await stand_in("", timeout=6.0 if ending == "timed out" else None)
    await page.use_width(width)
    await page.navigate(f"{open_api}/?run={handle.id}")
    if ending != "timed out":  # (that one may be over before the page has loaded)
        try:
            await page.wait_for(shown("review"), what="the review offered while the run awaits it")
        except TimeoutError as error:  # what the page, its API and the run said then (seen once in CI)
            raise AssertionError(f"{error}: {await what_was_said(page, open_api, handle)}") from error
        if ending == "cancelled":
            await handle.cancel()
        elif ending == "terminated":
            await handle.terminate("an operator stopped it")
        else:
            await handle.signal(StandInRun.fail)
    with contextlib.suppress(WorkflowFailureError):
        await handle.result()
    # The page left open finds out, and so does one opened afterwards.
    for reload in (False, True):
        if reload:
            await page.navigate(f"{open_api}/?run={handle.id}")
        said = await page.wait_for("document.getElementById('run-phase').textContent.startsWith('Ended:') && "
                                   "document.getElementById('run-phase').textContent", 30, what="how it ended")
        assert said == f"Ended: {ending}"
        assert not await page.evaluate(shown("review")) and not await page.evaluate(shown("clarify"))
        assert await page.evaluate(shown("plan"))  # the plan it awaited a review of is still there
        error = await page.evaluate(f"{shown('run-error')} && document.getElementById('run-error').textContent")
        assert error and (FAILURE in error if ending == "failed" else True), error


# What a restarting server answers, as a JavaScript expression.
RESTARTING = 'new Response(JSON.stringify({ detail: "the server is restarting" }), { status: 503 })'
# The next request for a run's status fails as a restarting server's would; the ones after pass.
FAIL_NEXT_STATUS = """(() => {
  const original = window.fetch;
  window.fetch = (url, options) => {
    if (!STATUS_REQUEST.test(url)) return original(url, options);
    window.fetch = original;
    return Promise.resolve(RESTARTING);
  };
  return true;
})()""".replace("STATUS_REQUEST", STATUS_REQUEST).replace("RESTARTING", RESTARTING)


async def test_a_run_whose_first_status_failed_is_shown_once_the_server_answers(open_api: str, stand_in: StartStandIn,
                                                                                page: Page) -> None:
    """A page that opened a run while the server could not answer (a restart, a blip) asks again and
    follows the run, as a person would reload: it once stayed on the error, with no review to offer."""
    handle = await stand_in("")  # awaits a plan review
    await page.navigate(f"{open_api}/")
    await page.wait_for("window.deerflowPage !== undefined && window.deerflowPage.started", what="the page")
    await page.evaluate(FAIL_NEXT_STATUS)
    await page.evaluate(f"window.deerflowPage.openRun({json.dumps(handle.id)}).then(() => true, () => true)")
    assert await page.evaluate("document.getElementById('run-error').textContent") == "the server is restarting"
    assert await page.evaluate("window.deerflowPage.state.feed !== null"), "the run's feed was not followed"
    await page.wait_for(shown("review"), 20, what="the review offered once the status was asked again")
    assert not await page.evaluate(shown("run-error"))
    await handle.terminate("the test is over")


# The next status request for the run RUN is held; window.__failHeld() then fails it with a 503.
HOLD_NEXT_STATUS_OF = """((run) => {
  const original = window.fetch;
  window.fetch = (url, options) => {
    if (!STATUS_REQUEST.test(url) || !url.endsWith(`/${encodeURIComponent(run)}`)) return original(url, options);
    window.fetch = original;
    return new Promise((resolve) => {
      window.__failHeld = () => resolve(RESTARTING);
    });
  };
  return true;
})""".replace("STATUS_REQUEST", STATUS_REQUEST).replace("RESTARTING", RESTARTING)


async def test_a_failure_of_a_run_left_for_another_is_not_shown_on_the_other(open_api: str, stand_in: StartStandIn,
                                                                             page: Page) -> None:
    """A run's status failing after the reader has opened another run says nothing on the other."""
    left, opened = await stand_in(""), await stand_in("")
    await page.navigate(f"{open_api}/")
    await page.wait_for("window.deerflowPage !== undefined && window.deerflowPage.started", what="the page")
    await page.evaluate(f"{HOLD_NEXT_STATUS_OF}({json.dumps(left.id)})")
    await page.evaluate(f"window.__openLeft = window.deerflowPage.openRun({json.dumps(left.id)}); true")
    await page.wait_for("window.__failHeld !== undefined", what="the left run's status request")
    await page.evaluate(f"window.deerflowPage.openRun({json.dumps(opened.id)}).then(() => true)")
    await page.wait_for(shown("review"), 20, what="the review of the run opened second")
    await page.evaluate("window.__failHeld(); window.__openLeft.then(() => true, () => true)")
    assert await page.evaluate("window.deerflowPage.state.run") == opened.id
    said = await page.evaluate("document.getElementById('run-error').textContent")
    assert not await page.evaluate(shown("run-error")), said
    for handle in (left, opened):
        await handle.terminate("the test is over")


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_run_list_refreshes_itself_and_names_runs_by_question(open_api: str, stand_in: StartStandIn,
                                                                        page: Page, width: int) -> None:
    await page.use_width(width)
    await page.navigate(f"{open_api}/")
    await page.wait_for("window.deerflowPage !== undefined && window.deerflowPage.started", what="the page")
    question = "How much power do tidal stream turbines produce?"
    handle = await stand_in("", question=question)  # started elsewhere, after the page loaded
    entry = (f"[...document.querySelectorAll('#runs li')].find((li) => li.title === {json.dumps(handle.id)})"
             "?.innerText")
    listed = await page.wait_for(f"{entry}?.includes('waiting for a review of its plan')", 20,
                                 what="the new run, unclicked")
    listed = await page.evaluate(entry)
    assert listed.startswith(question) and handle.id not in listed, listed
    await handle.cancel()
    await page.wait_for(f"{entry}?.includes('cancelled')", 20, what="its end, unclicked")
    unnamed = await stand_in("")  # a run started without the question on record: its id
    await page.wait_for(f"[...document.querySelectorAll('#runs li')].some((li) => li.innerText.startsWith("
                        f"{json.dumps(unnamed.id)}))", 20, what="the run without a question")
    await unnamed.cancel()


# Controls (and the page itself) wider than the screen, or off its edges.
OFF_SCREEN = off_screen("button, input, select, textarea, audio, summary")


async def test_the_page_fits_a_phone(open_api: str, stand_in: StartStandIn, page: Page) -> None:
    await page.send("Emulation.setDeviceMetricsOverride", **PHONE)
    handle = await stand_in(WIDE_REPORT, question="What will tidal power deliver by 2030?")
    await handle.result()
    await page.navigate(f"{open_api}/?run={handle.id}")
    await page.wait_for(shown("flows"), 30, what="the finished report and its buttons")
    assert await page.evaluate("innerWidth") == PHONE["width"]
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / "phone-report.png")
    assert await page.evaluate(OFF_SCREEN) == []
    # The table's cells wrap; the code, which cannot, scrolls in its own box.
    assert await page.evaluate("(() => { const e = document.querySelector('#report pre');"
                               " return e.scrollWidth > e.clientWidth; })()")
    await page.evaluate("document.getElementById('edit-report').click(); true")
    await page.wait_for(shown("editor"), what="the editor")
    await page.screenshot(SCREENSHOTS / "phone-editor.png")
    assert await page.evaluate(OFF_SCREEN) == []


PHASE = "document.getElementById('run-phase').textContent"


@pytest.mark.parametrize("width", list(WIDTHS))
async def test_cancel_asks_first_and_then_ends_the_run_cancelled(open_api: str, stand_in: StartStandIn, page: Page,
                                                                width: int) -> None:
    """Every running or paused run offers Cancel (issue #49 §2); it asks first, No keeps the run, and
    Yes ends it cancelled (POST /api/runs/ID/cancel), said in the run view and the list; an ended run
    offers it no more. At a budget pause the banner's Cancel asks the same (tests/test_web_page_budget.py)."""
    await page.use_width(width)
    handle = await stand_in("", question="How much power do tidal stream turbines produce?")
    await page.navigate(f"{open_api}/?run={handle.id}")
    await page.wait_for(f"{PHASE}.startsWith('Now:')", 30, what="the paused run")
    await page.press("#cancel-ask")
    question = await page.wait_for(f"{shown('cancel-confirm')} && document.getElementById('cancel-confirm')"
                                   ".textContent", what="the question")
    assert "Cancel this run?" in question and "writes no report" in question, question
    assert await page.evaluate(OFF_SCREEN) == []
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / f"cancel-asks-{width}.png")

    await page.press("#cancel-no")  # changed their mind: nothing is sent
    await page.wait_for(f"!({shown('cancel-confirm')}) && {shown('cancel-ask')}", what="the question withdrawn")
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING

    await page.press("#cancel-ask")
    await page.press("#cancel-yes")
    with pytest.raises(WorkflowFailureError) as ended:
        await handle.result()
    assert isinstance(ended.value.cause, CancelledError)
    said = await page.wait_for(f"{PHASE}.startsWith('Ended:') && {PHASE}", 30, what="the run view's end")
    assert said == "Ended: cancelled"
    assert not await page.evaluate(shown("cancel-run")), "an ended run offers no Cancel"
    entry = f"document.querySelector('#runs li[data-run={json.dumps(handle.id)}] .phase')?.textContent"
    await page.press("#refresh")
    listed = await page.wait_for(f"{entry}?.startsWith('cancelled') && {entry}", 30, what="the list's word")
    assert "finished" not in listed
    await page.screenshot(SCREENSHOTS / f"cancel-done-{width}.png")
