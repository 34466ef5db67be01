"""The Web UI path a person takes: open a paused run in the dev server's UI and approve its plan.

Why a browser: the README tells people to approve plans from the Web UI (Send a Signal,
``plan_feedback``, ``"[ACCEPTED]"``). That only works if the run shows up as waiting there, the
UI offers our signal, and the JSON string it sends is what the workflow accepts. Headless Debian
Chromium is driven over the DevTools protocol (tests/support/cdp.py); nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from config.settings import load_settings
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.embedded import search_attribute_flags
from tests.support.cdp import Page, chromium_path
from tests.support.processes import DevServer, start_worker
from tests.support.runs import run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchRequest, ResearchResult
from workflows.contracts.status import RunStatus

CHROMIUM = chromium_path()
LEAD_SCREENSHOT = Path("/tmp/ui-awaiting-review.png")  # kept outside pytest's tmp dir for a person to look at

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(300),  # a loaded 2-core machine: the dev server, the worker and the UI can each take a minute
]

# The UI renders some dialogs twice (one copy hidden), so elements are looked up among visible ones.
VISIBLE = """(selector, text) => [...document.querySelectorAll(selector)].find(
  (e) => (e.offsetParent !== null || getComputedStyle(e).position === 'fixed')
         && (text === null || e.innerText.trim() === text))"""
# The page's text including same-origin frames (the UI renders current details in an iframe).
ALL_TEXT = """() => [document, ...[...document.querySelectorAll('iframe')].map((f) => f.contentDocument)]
  .filter((d) => d && d.body).map((d) => d.body.innerText).join('\\n')"""
# Clicks go through real mouse events at the element's centre, as a person's would.
CENTRE = """(selector, text) => {
  const found = (""" + VISIBLE + """)(selector, text);
  if (!found || found.disabled) return null;
  let box = found.getBoundingClientRect();
  if (box.top < 0 || box.bottom > innerHeight) {  // scrolling closes open menus, so only when needed
    found.scrollIntoView({block: 'center'});
    box = found.getBoundingClientRect();
  }
  const [x, y] = [box.x + box.width / 2, box.y + box.height / 2];
  const hit = document.elementFromPoint(x, y);  // not covered by a closing menu or a fading overlay
  return hit && (found.contains(hit) || hit.contains(found)) ? [x, y] : null;
}"""


async def click(page: Page, selector: str, text: str | None = None, timeout: float = 20.0) -> None:
    """Click an element once it is there, enabled and still: menus and dialogs slide in."""
    what = f"{selector} {text or ''}".strip()
    centre = f"({CENTRE})({json.dumps(selector)}, {json.dumps(text)})"
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        current = await page.wait_for(centre, max(0.1, deadline - time.monotonic()), what=what)
        if current == previous:
            break
        previous = current
        await asyncio.sleep(0.15)
    await page.click_at(*current)


async def page_text(page: Page) -> str:
    return str(await page.evaluate("document.body.innerText"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    dev = DevServer(tmp_path_factory.mktemp("ui") / "temporal.db", extra_args=search_attribute_flags()).start()
    yield dev
    dev.stop()


@pytest.fixture(scope="module")
async def client(server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    client = await connect_when_ready(server.address, data_converter=data_converter(load_settings()))
    log = tmp_path_factory.mktemp("ui-worker") / "worker.log"
    worker = await start_worker(server, client, log)
    yield client
    worker.stop()


async def wait_awaiting_review(handle: WorkflowHandle[ResearchRequest, ResearchResult]) -> RunStatus:
    deadline = time.monotonic() + 30
    while True:
        status = await handle.query("status", result_type=RunStatus)
        if status.awaiting == "plan_feedback":
            return status
        assert time.monotonic() < deadline, f"the run never paused for review: {status.phase}"
        await asyncio.sleep(0.2)


async def test_approve_a_plan_from_the_web_ui(server: DevServer, client: Client, page: Page, tmp_path: Path) -> None:
    request = ResearchRequest(question="What are the prospects of solid-state batteries?", max_step_num=1)
    workflow_id = run_id("ui")
    handle = await client.start_workflow(WORKFLOW_TYPE, request, id=workflow_id, task_queue=TASK_QUEUE,
                                         result_type=ResearchResult)
    paused = await wait_awaiting_review(handle)
    assert paused.plan is not None

    try:
        # 1. The run's page shows it running.
        await page.open_until(f"http://127.0.0.1:{server.ui_port}/namespaces/default/workflows/{workflow_id}",
                              "document.body.innerText.includes('More Actions')", 90, what="the run page")
        text = await page_text(page)
        assert workflow_id in text and "Running" in text.title(), text[:2000]
        await page.screenshot(tmp_path / "1-run-page.png")

        # ...and, under User Metadata, the workflow's current details say what it waits for.
        await click(page, "[role=tab],a,button", "User Metadata")
        await page.wait_for(f"({ALL_TEXT})().includes('Awaiting plan review')", 20, what="the current details")
        assert paused.plan.title in await page.evaluate(f"({ALL_TEXT})()")
        shot = await page.screenshot(tmp_path / "2-current-details.png")
        shutil.copyfile(shot, LEAD_SCREENSHOT)

        # 2. More Actions -> Send a Signal -> plan_feedback, "[ACCEPTED]".
        await click(page, "button", "More Actions")
        await click(page, "[data-testid=signal-button]")
        dialog = "#signal-confirmation-modal"
        await click(page, f"{dialog} [data-testid=signal-select-button]")
        await click(page, f"{dialog} [role=option]", "plan_feedback")
        await click(page, f"{dialog} [role=textbox][aria-label=Data]")
        await page.insert_text(json.dumps("[ACCEPTED]"))
        typed = await page.evaluate(f"({VISIBLE})('{dialog} [role=textbox][aria-label=Data]', null).innerText")
        assert typed.strip() == '"[ACCEPTED]"', typed
        await page.screenshot(tmp_path / "3-signal-form.png")
        await click(page, f"{dialog} [data-testid=confirm-modal-button]")
        await page.wait_for(f"!document.querySelector('{dialog}[open]')", what="the signal dialog to close")
        await page.screenshot(tmp_path / "4-signal-sent.png")

    except Exception:
        await page.screenshot(tmp_path / "failure.png")  # what the browser showed when it went wrong
        raise

    # 3. The run researches and reports.
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome is Outcome.REPORT
    assert result.report.strip()
    assert (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED
    await page.open_until(f"http://127.0.0.1:{server.ui_port}/namespaces/default/workflows/{workflow_id}",
                          "document.body.innerText.toUpperCase().includes('COMPLETED')", 90, what="the run completed")
    await page.screenshot(tmp_path / "5-completed.png")

    # The signal in history is the UI's, exactly as the README tells people to send it.
    history = await handle.fetch_history()
    signals = [event.workflow_execution_signaled_event_attributes for event in history.events
               if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert [signal.signal_name for signal in signals] == ["plan_feedback"]
    assert json.loads(signals[0].input.payloads[0].data) == "[ACCEPTED]"
