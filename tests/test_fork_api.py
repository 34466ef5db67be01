"""Forks through the API and our page (issue #44 §2), on the dev server with a real worker process on
the fake model: ``POST /api/runs/ID/fork`` and ``GET /api/runs/ID/forks`` behind the tokens' roles (who
may see a run may fork it, a viewer may not, the fork is the caller's, and a source lists only the
forks its reader may see), and the page's Fork button beside the timeline's, in headless Chromium at
1280 and 390 px: a fork from step 2 in the news style opens the fork, which links to its source, and
the source then lists it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from config.settings import load_settings
from offline.model_server import FakeModelServer
from runtime.run_memo import started_by
from tests.support.cdp import Page, chromium_path, off_screen
from tests.support.processes import DevServer, WorkerProcess, start_worker
from tests.support.runs import QUESTION
from tests.support.web_server import api_server
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.research import ResearchResult

pytestmark = pytest.mark.timeout(300)
SCREENSHOTS = Path("/tmp/our-page")
TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789", "rita": "rita-token-0123456789",
          "vera": "vera-token-0123456789"}
ROLES = {"rita": "reviewer", "vera": "viewer"}
NEWS = "## What We Know"
NOTE = b"# Fleet trial\n\nSodium-ion packs kept 91% capacity after 2,000 cycles in the depot's fleet trial.\n"
NOTE_PHRASE = "91%"  # the offline reporter's news style (offline/report_styles.py)


@dataclass
class Stack:
    url: str
    client: Client

    def http(self, name: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {TOKENS[name]}"})


@pytest.fixture(scope="module")
def resources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The resource root the worker reads documents from, and the API server keeps uploads in."""
    return tmp_path_factory.mktemp("fork-resources")


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, tmp_path_factory: pytest.TempPathFactory,
                 provider_env: dict[str, str], resources: Path) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, tmp_path_factory.mktemp("fork-api") / "worker.log",
                                 **provider_env, DEERFLOW_RESOURCE_ROOTS=str(resources))
    yield process
    process.stop()


@pytest.fixture(scope="module")
async def stack(client: Client, worker: WorkerProcess, resources: Path) -> AsyncIterator[Stack]:
    named = [{"name": name, "token": token, **({"role": ROLES[name]} if name in ROLES else {})}
             for name, token in TOKENS.items()]
    settings = load_settings(environ={"DEERFLOW_WEB_TOKENS": json.dumps(named),
                                      "DEERFLOW_RESOURCE_ROOTS": str(resources)})
    async with api_server(client, settings) as url:
        yield Stack(url, client)


async def finished(stack: Stack, run: str) -> ResearchResult:
    return await asyncio.wait_for(stack.client.get_workflow_handle(run, result_type=ResearchResult).result(), 120)


@pytest.fixture(scope="module")
async def source(stack: Stack) -> str:
    """alice's run, researched to its report."""
    async with stack.http("alice") as alice:
        started = await alice.post("/api/runs", json={"question": QUESTION, "auto_accept_plan": True})
    assert started.status_code == 200, started.text
    run = started.json()["id"]
    assert (await finished(stack, run)).plan is not None
    return run


async def test_who_may_see_a_run_and_start_runs_may_fork_it_and_the_fork_is_theirs(
        stack: Stack, source: str, model_server: FakeModelServer) -> None:
    fork = f"/api/runs/{source}/fork"
    model_server.requests.clear()
    async with stack.http("bob") as bob, stack.http("vera") as vera, stack.http("alice") as alice, \
            stack.http("rita") as rita:
        not_bobs = await bob.post(fork, json={"from": "report"})
        assert not_bobs.status_code == 404 and source not in not_bobs.text  # bob may not even see it
        assert (await vera.post(fork, json={"from": "report"})).status_code == 403  # a viewer starts nothing
        which = await alice.post(fork, json={"from": "step"})
        assert which.status_code == 400 and which.json()["detail"].startswith("Value error, a fork from a step names")
        assert (await alice.post(fork, json={"from": "report", "state": {}})).status_code == 400  # no state from here
        # Nor through the door for new runs, naming the source in the request itself.
        smuggled = await bob.post("/api/runs", json={"question": QUESTION, "auto_accept_plan": True,
                                                     "forked_from": {"workflow_id": source, "stage": "report"}})
        assert smuggled.status_code == 400 and f"/api/runs/{source}/fork" in smuggled.json()["detail"]
        too_far = await alice.post(fork, json={"from": "step", "step": 9})
        assert too_far.status_code == 409 and "plan has 3 step(s), not 9" in too_far.json()["detail"]
        assert model_server.requests == []  # a refusal starts nothing

        mine = await alice.post(fork, json={"from": "report", "report_style": "news"})
        assert mine.status_code == 200, mine.text
        hers = (await finished(stack, mine.json()["id"]))
        assert NEWS in hers.report and hers.usage.llm_calls == 1 == len(model_server.requests)
        reviewed = await rita.post(fork, json={"from": "step", "step": 3, "edit": "Only the 2030 outlook"})
        assert reviewed.status_code == 200, reviewed.text
        await finished(stack, reviewed.json()["id"])

        for forked, who in ((mine.json()["id"], "alice"), (reviewed.json()["id"], "rita")):
            description = await stack.client.get_workflow_handle(forked).describe()
            assert await started_by(description) == Actor(name=who, via=Via.API)
        shown = (await alice.get(f"/api/runs/{mine.json()['id']}")).json()
        assert shown["run"]["forked_from"]["workflow_id"] == source and shown["may"]["fork"] is True
        # Each reader sees the forks they may: the reviewer both, alice not rita's, bob none of them.
        both = await listed_forks(rita, source, 2)  # once the index lists both
        assert {(f["id"], f["at"], f["started_by"]) for f in both} == {
            (mine.json()["id"], "report", "alice (api)"), (reviewed.json()["id"], "step 3", "rita (api)")}
        assert [f["id"] for f in (await alice.get(f"/api/runs/{source}/forks")).json()["forks"]] == [mine.json()["id"]]
        assert (await bob.get(f"/api/runs/{source}/forks")).status_code == 404
        assert (await vera.get(f"/api/runs/{source}")).json()["may"]["fork"] is False
        inspection = (await alice.get(f"/api/runs/{mine.json()['id']}/inspection")).json()
        assert inspection["forked_from"] == {"workflow_id": source, "at": "report"}
        assert (await alice.get(f"/api/runs/{source}/inspection")).json()["forks"] == [
            {"workflow_id": mine.json()["id"], "at": "report"}]


async def test_a_fork_of_a_run_researching_another_token_s_uploads_is_refused_as_such_a_run_is(
        stack: Stack) -> None:
    async with stack.http("alice") as alice, stack.http("rita") as rita:
        uploaded = await alice.post("/api/rag/upload", files={"file": ("fleet trial.md", NOTE, "text/markdown")})
        assert uploaded.status_code == 200, uploaded.text
        document = uploaded.json()["uri"]
        started = await alice.post("/api/runs", json={"question": QUESTION, "auto_accept_plan": True,
                                                      "max_step_num": 1, "resources": [document]})
        assert started.status_code == 200, started.text
        source = started.json()["id"]
        await finished(stack, source)
        refused = await rita.post(f"/api/runs/{source}/fork", json={"from": "report"})  # rita may see it
        assert refused.status_code == 403 and "uploads of another token" in refused.json()["detail"]
        assert (await rita.post("/api/runs", json={"question": QUESTION, "resources": [document]})).status_code == 403
        mine = await alice.post(f"/api/runs/{source}/fork", json={"from": "report"})
        assert mine.status_code == 200, mine.text
        await finished(stack, mine.json()["id"])


async def listed_forks(http: httpx.AsyncClient, run: str, count: int) -> list[dict]:
    """The run's forks once the server's index lists ``count`` of them (it lags a run's start a little)."""
    for _ in range(100):
        forks = (await http.get(f"/api/runs/{run}/forks")).json()["forks"]
        if len(forks) >= count:
            return forks
        await asyncio.sleep(0.2)
    raise AssertionError(f"the forks of {run} never listed {count}: {forks}")


OFF_SCREEN = off_screen("button, select, textarea, #fork-links p")


@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("width", [1280, 390])
async def test_the_page_s_fork_button_forks_from_a_step_and_both_runs_link(
        stack: Stack, source: str, page: Page, width: int, model_server: FakeModelServer) -> None:
    await page.use_width(width)
    await page.navigate(f"{stack.url}/runs/{source}")
    await page.evaluate(f"sessionStorage.setItem('deerflow-token', {json.dumps(TOKENS['alice'])})")
    await page.navigate(f"{stack.url}/runs/{source}")
    await page.wait_for("window.deerflowPage && window.deerflowPage.started", what="the page")
    await page.press("#fork-open")  # beside the timeline's button
    assert await page.evaluate("document.getElementById('fork-open').parentElement"
                               " === document.getElementById('timeline-open').parentElement")
    await page.wait_for("document.getElementById('fork-step').options.length === 3", what="the steps to choose")
    await page.evaluate("""(() => { const set = (id, value) => { const e = document.getElementById(id);
        e.value = value; e.dispatchEvent(new Event('change')); };
        set('fork-from', 'step'); set('fork-step', '2'); set('fork-style', 'news'); })()""")
    assert await page.evaluate("document.getElementById('fork-edit-meaning').textContent") == \
        "The step's new description (optional):"
    await page.type_into("#fork-edit", "Compare sulfide and oxide electrolytes")
    assert await page.evaluate(OFF_SCREEN) == []
    SCREENSHOTS.mkdir(exist_ok=True)
    await page.screenshot(SCREENSHOTS / f"fork-form-{width}.png")
    model_server.requests.clear()
    await page.press("#fork-form button[type=submit]")

    forked = await page.wait_for(f"window.deerflowPage.state.run !== {json.dumps(source)} && "
                                 "window.deerflowPage.state.run", 30, what="the fork opened")
    assert forked.startswith(f"{source}-fork-") and f"/runs/{forked}" == await page.evaluate("location.pathname")
    await page.wait_for(f"document.getElementById('fork-links').textContent.includes('Forked from {source} at step 2')",
                        60, what="the fork's link to its source")
    result = await finished(stack, forked)
    assert NEWS in result.report and result.plan is not None
    assert result.plan.steps[1].description == "Compare sulfide and oxide electrolytes"
    assert model_server.requests_for("coordinator") == model_server.requests_for("planner") == []
    await page.wait_for(f"document.getElementById('report').textContent.includes({json.dumps('What We Know')})",
                        60, what="the fork's report")
    await page.wait_for("document.getElementById('run-phase').textContent.startsWith('Ended: finished')", 30,
                        what="the fork shown finished")
    assert await page.evaluate(OFF_SCREEN) == []
    await page.evaluate("document.getElementById('run').scrollIntoView()")
    await page.screenshot(SCREENSHOTS / f"fork-opened-{width}.png")

    await page.press("#fork-links a")  # back to the source, by the link
    await page.wait_for(f"window.deerflowPage.state.run === {json.dumps(source)}", what="the source opened")
    await page.wait_for(f"document.getElementById('fork-links').textContent.includes({json.dumps(forked)})", 30,
                        what="the source's list of forks")
    line = await page.evaluate(f"""[...document.querySelectorAll('#fork-links p')]
        .find((p) => p.textContent.includes({json.dumps(forked)})).textContent""")
    assert line == f"Fork: {forked} at step 2 · finished · by alice (api)"
    assert await page.evaluate(OFF_SCREEN) == []
    await page.evaluate("document.getElementById('run').scrollIntoView()")
    await page.screenshot(SCREENSHOTS / f"fork-listed-{width}.png")
