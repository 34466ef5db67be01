"""Our research page in headless Chromium: ask, review (edit, then accept), follow, read and export.

And hostile reports: a run whose report and plan hold ``<script>``, ``onerror=``, ``javascript:``
links and raw HTML is opened, and nothing of it may run or survive as markup; a report whose images,
media and prefetches point at another host loads nothing from it, on the page or once exported.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from config.settings import load_settings
from tests.support.cdp import STATUS_REQUEST, Chromium, Page, chromium_path, open_page
from tests.support.fake_http import FakeHTTPServer, Reply
from tests.support.processes import DevServer, start_worker
from tests.support.runs import run_id
from tests.support.web_server import api_server
from workflows.contracts.plan import Plan, Step
from workflows.contracts.research import WORKFLOW_TYPE, ResearchResult
from workflows.contracts.status import Phase, RunStatus
from workflows.research.status_view import OFFLINE_NOTICE

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(120),
]

HOSTILE = """# Findings <img src=x onerror="window.__pwned='img'">

<script>window.__pwned = 'script'</script>
<svg onload="window.__pwned='svg'"><circle r="1"/></svg>
<iframe src="javascript:window.__pwned='iframe'"></iframe>
<a href="javascript:window.__pwned='raw-link'">raw link</a>
[markdown link](javascript:window.__pwned='md-link')
<form action="javascript:window.__pwned='form'"><button>go</button></form>
<div style="background:url(javascript:window.__pwned='css')">styled</div>

A fine source: [Example](http://127.0.0.2:9/a) (loopback: nothing leaves the machine).
"""


@workflow.defn(name=WORKFLOW_TYPE, sandboxed=False)  # the module imports test helpers
class HostileRun:
    """Stands in for a research run whose model wrote the hostile ``report`` (on its own task queue)."""

    @workflow.run
    async def run(self, report: str) -> ResearchResult:
        return ResearchResult(report=report, plan=_hostile_plan())

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        return RunStatus(phase=Phase.COMPLETED, plan=_hostile_plan())


def _hostile_plan() -> Plan:
    return Plan(title="<img src=x onerror=\"window.__pwned='plan'\">",
                steps=[Step(title="<script>window.__pwned='step'</script>", description="x")])


@pytest.fixture(scope="module")
async def base(dev_server: DevServer, client: Client, tmp_path_factory: pytest.TempPathFactory,
               ) -> AsyncIterator[str]:
    log = tmp_path_factory.mktemp("page-worker") / "worker.log"
    process = await start_worker(dev_server, client, log)
    settings = load_settings().model_copy(update={"web_token": None})
    async with api_server(client, settings) as url:
        yield url
    process.stop()


# Markup in a subtree that could run code or load something: script-capable elements, event
# handler attributes, javascript: URLs and inline styles.
DANGEROUS = """(root) => [...root.querySelectorAll('*')].flatMap((e) => {
  const found = [];
  if (['SCRIPT', 'IFRAME', 'FORM', 'OBJECT', 'EMBED', 'STYLE'].includes(e.tagName)) found.push(e.tagName);
  for (const a of e.attributes) {
    if (a.name.startsWith('on') || a.name === 'style' || /^\\s*javascript:/i.test(a.value)) found.push(a.name);
  }
  return found;
})"""

SCREENSHOTS = Path("/tmp/our-page")  # kept outside pytest's tmp dir for a person to look at
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
EXPORT_POLICY = "default-src 'none'; img-src data:; base-uri 'none'; form-action 'none'"
# An exported document's policy, every attribute by which it would fetch something (a link's href
# only on a click), and its first paragraph's text.
LOADS = """(doc) => ({
  policy: doc.querySelector('meta[http-equiv="Content-Security-Policy"]').content,
  loads: [...doc.querySelectorAll('*')].flatMap((e) => ['src', 'srcset', 'poster', 'background', 'data', 'href']
    .filter((name) => e.hasAttribute(name) && !(e.tagName === 'A' && name === 'href'))
    .map((name) => `${e.tagName} ${name}=${e.getAttribute(name)}`)),
  first: doc.body.firstElementChild.innerText.trim(),
})"""

CAPTURE_EXPORTS = """window.__exports = [];
const original = URL.createObjectURL;
URL.createObjectURL = (blob) => {
  blob.text().then((t) => window.__exports.push([blob.type, t]));
  return original(blob);
};
true"""


async def test_ask_edit_accept_follow_report_and_export(base: str, page: Page, tmp_path: Path) -> None:
    try:
        await page.navigate(f"{base}/")
        # The page's own script (deferred, after the vendored ones) has set its handlers up.
        await page.wait_for("typeof DOMPurify !== 'undefined' && typeof marked !== 'undefined' && "
                            "window.deerflowPage !== undefined && window.deerflowPage.started",
                            what="the page's scripts")
        # A refused start says why on the page (no alert); the next start clears the notice and the box.
        await page.type_into("#question", "   ")
        await page.press("#new-run button[type=submit]")
        refused = await page.wait_for("!document.getElementById('start-notice').hidden && "
                                      "document.getElementById('start-notice').textContent", what="the refusal")
        assert "blank" in refused
        await page.evaluate("document.getElementById('question').value = ''; true")
        await page.type_into("#question", QUESTION)
        await page.press("#new-run button[type=submit]")
        await page.wait_for("window.deerflowPage.state.run", what="the run to start")
        assert await page.evaluate("document.getElementById('question').value") == ""
        assert await page.evaluate("document.getElementById('start-notice').hidden")
        # The run list names the run by its question.
        await page.wait_for(f"[...document.querySelectorAll('#runs li')].some((li) => li.innerText.startsWith("
                            f"{json.dumps(QUESTION)}))", what="the run listed by its question")

        await page.wait_for("!document.getElementById('review').hidden", 60, what="the plan to await review")
        first_title = await page.evaluate("document.getElementById('plan-title').textContent")
        first_steps = await page.evaluate("document.getElementById('plan-steps').innerText")
        assert first_title and await page.evaluate("document.getElementById('plan-steps').children.length") == 3
        assert not await page.evaluate("document.getElementById('offline').hidden")  # the offline model says so

        await page.type_into("#edit-text", "add a step on charging infrastructure")
        await page.press("#edit-form button")
        await page.wait_for("document.getElementById('plan-version').textContent === 'v2' && "
                            "!document.getElementById('review').hidden", 60, what="the revised plan")
        assert await page.evaluate("document.getElementById('plan-steps').innerText") != first_steps
        assert await page.evaluate("document.getElementById('plan-title').textContent") == first_title  # the report's

        await page.press("#accept")
        await page.wait_for("document.getElementById('citations').children.length > 0", 90, what="the report")
        report_links = await page.evaluate("[...document.querySelectorAll('#report a')].map((a) => a.href)")
        sources = await page.evaluate("[...document.querySelectorAll('#sources a')].map((a) => a.href)")
        activity = await page.evaluate("document.getElementById('activity').innerText")
        assert report_links and sources and "web_search" in activity
        assert await page.evaluate("document.querySelector('#report h1') !== null")
        # The step states come from the status the page fetches after each feed item.
        every_step_done = (
            "[...document.querySelectorAll('#plan-steps li')].every((li) => li.innerText.includes('done'))"
        )
        await page.wait_for(every_step_done, 30, what="every step shown done")
        # Findings and step previews are rendered markdown; every tool call row says what it did.
        assert await page.evaluate("document.querySelector('#activity details .md strong, #activity details .md h2')"
                                   " !== null && document.querySelector('#plan-steps .finding') !== null")
        for box in ("activity", "plan-steps"):
            shown = await page.evaluate(f"document.getElementById('{box}').innerText")
            assert "**" not in shown and not re.search(r"(?m)^#+ ", shown), shown
        rows = await page.evaluate("[...document.querySelectorAll('#activity > li')].map((li) => li.innerText)")
        assert not [line for line in rows if line.rstrip().endswith(":")], rows
        assert any("handed the question to the planner: " in line for line in rows), rows
        # Two opens of the run overlapping (a question sent while the page was still starting, then
        # the start opening the run in the address) show each item once: the newer feed stops the older.
        await page.evaluate(OPEN_TWICE_AT_ONCE)
        await page.wait_for(f"document.querySelectorAll('#activity > li').length >= {len(rows)} && "
                            "window.deerflowPage.state.lastStatus", 30, what="the reopened run")
        await asyncio.sleep(1.0)  # a second feed would have replayed every item by then
        assert await page.evaluate("[...document.querySelectorAll('#activity > li')].map((li) => li.innerText)") == rows
        # Reopened, the finished run's whole feed arrives at once, and each item asks for a fresh status: a
        # query its worker answers by replaying the run. One request in flight at a time, not one an item.
        await page.evaluate(COUNT_STATUS_REQUESTS)
        await page.evaluate("window.deerflowPage.openRun(window.deerflowPage.state.run).then(() => true)")
        await page.wait_for(f"document.querySelectorAll('#activity > li').length >= {len(rows)} && "
                            "window.deerflowPage.state.lastStatus", 30, what="the run reopened")
        await asyncio.sleep(1.0)
        assert await page.evaluate("window.__statusAtOnce") == 1

        await page.evaluate(CAPTURE_EXPORTS)
        await page.press("#export-md")
        await page.press("#export-html")
        exports = await page.wait_for("window.__exports.length === 2 && window.__exports", what="both exports")
        kinds = {kind: text for kind, text in exports}
        report = await page.evaluate("window.deerflowPage.state.report")
        # The offline model wrote it: both exports say so first, as `starter.py report` does.
        assert kinds["text/markdown"] == f"> {OFFLINE_NOTICE}\n\n{report}"
        assert kinds["text/html"].startswith("<!doctype html>") and "<h1" in kinds["text/html"]
        exported = await page.evaluate(f"({LOADS})(new DOMParser().parseFromString({json.dumps(kinds['text/html'])},"
                                       " 'text/html'))")
        assert exported["policy"] == EXPORT_POLICY and exported["loads"] == [], exported
        assert exported["first"] == OFFLINE_NOTICE
        await page.evaluate("document.querySelectorAll('#activity details').forEach((d) => { d.open = true; }); true")
        SCREENSHOTS.mkdir(exist_ok=True)
        await page.screenshot(SCREENSHOTS / "research-run.png")
    except Exception:
        await page.screenshot(tmp_path / "failure.png")
        raise


# Opens the current run twice, both opens' status answers held until both have come, then given
# together: each open then starts its feed before either feed's first item can arrive.
OPEN_TWICE_AT_ONCE = """(() => {
  const original = window.fetch;
  const held = [];
  window.fetch = (url, options) => {
    if (!STATUS_REQUEST.test(url)) return original(url, options);
    return new Promise((resolve) => {
      held.push([original(url, options), resolve]);
      if (held.length < 2) return;
      window.fetch = original;
      Promise.all(held.map(([answer]) => answer)).then((answers) => held.forEach(([, give], i) => give(answers[i])));
    });
  };
  const run = window.deerflowPage.state.run;
  return Promise.all([run, run].map((id) => window.deerflowPage.openRun(id))).then(() => true);
})()""".replace("STATUS_REQUEST", STATUS_REQUEST)

# From now on, the most requests for the open run's status that the page has in flight at once.
COUNT_STATUS_REQUESTS = """(() => {
  const original = window.fetch;
  let inFlight = 0;
  window.__statusAtOnce = 0;
  window.fetch = (url, options) => {
    if (!STATUS_REQUEST.test(url)) return original(url, options);
    window.__statusAtOnce = Math.max(window.__statusAtOnce, ++inFlight);
    return original(url, options).finally(() => { inFlight -= 1; });
  };
  return true;
})()""".replace("STATUS_REQUEST", STATUS_REQUEST)


@pytest.fixture
async def hostile_run(client: Client) -> AsyncIterator[Callable[[str], Awaitable[str]]]:
    """Finishes a run whose model wrote the given report; its worker answers the page's queries
    until the test ends."""
    async with Worker(client, task_queue="hostile-runs", workflows=[HostileRun]):
        async def finished(report: str) -> str:
            workflow_id = run_id("hostile")
            handle = await client.start_workflow(HostileRun.run, report, id=workflow_id, task_queue="hostile-runs")
            await handle.result()
            return workflow_id
        yield finished


async def test_a_hostile_report_executes_nothing(base: str, hostile_run: Callable[[str], Awaitable[str]],
                                                 page: Page) -> None:
    await page.navigate(f"{base}/?run={await hostile_run(HOSTILE)}")
    await page.wait_for("document.querySelector('#report a') !== null", 30, what="the hostile report")
    await page.evaluate(CAPTURE_EXPORTS)
    await page.press("#export-html")
    exported = await page.wait_for("window.__exports.length === 1 && window.__exports[0][1]", what="the export")
    # Every link a person could click, clicked.
    await page.evaluate("[...document.querySelectorAll('#report a, #report button')]"
                        ".forEach((e) => e.click()); true")
    await asyncio.sleep(0.5)
    report = await page.evaluate("document.getElementById('report').innerHTML")
    live = await page.evaluate(f"({DANGEROUS})(document.getElementById('report'))")
    in_export = await page.evaluate(
        f"({DANGEROUS})(new DOMParser().parseFromString({json.dumps(exported)}, 'text/html').documentElement)")
    in_plan = await page.evaluate(
        f"[...document.querySelectorAll('#plan-title, #plan-steps')].flatMap({DANGEROUS})")
    plan = await page.evaluate("document.getElementById('plan').innerText")

    assert await page.evaluate("window.__pwned === undefined"), await page.evaluate("window.__pwned")
    assert live == in_export == in_plan == [], (live, in_export, in_plan)
    assert "http://127.0.0.2:9/a" in report
    assert "<img src=x onerror=" in plan and "<script>" in plan  # shown as text, not markup


# Everything in a report that a browser fetches on its own when the report is opened, each with its
# own path on the beacon (a host the model or a crawled page named; here another loopback address).
BEACONS = """# Findings

![chart]({url}/md-image.png)

<img src="{url}/img.png" alt="img"> <img srcset="{url}/srcset.png 2x" alt="srcset">
<picture><source srcset="{url}/picture.png"><img alt="picture"></picture>
<video src="{url}/video.mp4" poster="{url}/poster.png" preload="auto"></video>
<video preload="auto"><source src="{url}/video-source.mp4"><track src="{url}/track.vtt"></video>
<audio src="{url}/audio.mp3" preload="auto"></audio>
<svg><image href="{url}/svg-image.png" width="9" height="9"/></svg>
<input type="image" src="{url}/input.png" alt="input">
<table background="{url}/table.png"><tr><td background="{url}/td.png">cell</td></tr></table>
<link rel="prefetch" href="{url}/prefetch"> <link rel="stylesheet" href="{url}/style.css">

A source: [the beacon's page]({url}/linked) stays a link, and nothing fetches it.
"""
# What an export without its policy fetches from the beacon (the sanitiser already drops the rest).
FETCHED_UNGUARDED = {"/md-image.png", "/img.png", "/srcset.png", "/picture.png", "/poster.png", "/video.mp4",
                     "/video-source.mp4", "/audio.mp3", "/svg-image.png", "/table.png", "/td.png"}


async def test_an_exported_report_loads_nothing_remote(base: str, hostile_run: Callable[[str], Awaitable[str]],
                                                       page: Page, tmp_path: Path) -> None:
    with FakeHTTPServer(lambda _seen: Reply(404), host="127.0.0.2") as beacon:
        report = BEACONS.format(url=beacon.base_url)
        await page.navigate(f"{base}/?run={await hostile_run(report)}")
        await page.wait_for("document.querySelector('#report img') !== null", 30, what="the report")
        await page.evaluate(CAPTURE_EXPORTS)
        await page.press("#export-md")
        await page.press("#export-html")
        exports = dict(await page.wait_for("window.__exports.length === 2 && window.__exports", what="both exports"))
        from_the_page = [seen.path for seen in beacon.requests]

        exported = tmp_path / "report.html"
        exported.write_text(exports["text/html"], encoding="utf-8")
        await page.navigate(exported.as_uri())
        await page.wait_for("document.querySelector('h1') !== null", what="the exported report")
        await asyncio.sleep(1.0)  # media loads may start after the load event
        from_the_export = [seen.path for seen in beacon.requests]

        # The same file without its policy: every beacon above is heard, so the test would see a leak.
        unguarded = tmp_path / "unguarded.html"
        unguarded.write_text(exports["text/html"].replace("Content-Security-Policy", "X-No-Policy"), encoding="utf-8")
        await page.navigate(unguarded.as_uri())
        deadline = asyncio.get_running_loop().time() + 30
        while not {seen.path for seen in beacon.requests} >= FETCHED_UNGUARDED:
            assert asyncio.get_running_loop().time() < deadline, [seen.path for seen in beacon.requests]
            await asyncio.sleep(0.2)

    assert from_the_page == [] and from_the_export == [], (from_the_page, from_the_export)
    assert "/linked" not in {seen.path for seen in beacon.requests}
    assert exports["text/markdown"] == report  # the Markdown export keeps every address as written text


async def test_a_browser_that_died_is_started_again_for_the_next_page() -> None:
    """The test process's one browser (conftest ``chromium``) dying must not fail every later page."""
    assert CHROMIUM is not None
    browser = Chromium(CHROMIUM)
    try:
        async with open_page(browser) as first:
            assert await first.evaluate("1 + 1") == 2
        assert browser.process is not None
        browser.process.kill()
        browser.process.wait(timeout=10)
        async with open_page(browser) as second:
            assert await second.evaluate("2 + 2") == 4
    finally:
        browser.stop()
