"""Named API tokens and their roles (issue #26, item 3), with real tokens against the API server, a
real worker process and the dev server: a token sees and acts on its own runs, a viewer only
reads, a reviewer reviews anyone's, and every decision is recorded under the token's name."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from config.settings import load_settings
from server.access import holders_said, token_setting
from tests.support.processes import DevServer, query_status, start_worker
from tests.support.web_server import api_server

pytestmark = pytest.mark.timeout(180)

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789",
          "rita": "rita-token-0123456789", "vera": "vera-token-0123456789"}
ROLES = {"rita": "reviewer", "vera": "viewer"}
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"


@pytest.fixture(scope="module")
async def base(dev_server: DevServer, client: Client, tmp_path_factory: pytest.TempPathFactory,
               ) -> AsyncIterator[str]:
    folder: Path = tmp_path_factory.mktemp("tokens")
    worker = await start_worker(dev_server, client, folder / "worker.log", DEERFLOW_HOME=str(folder / "home"))
    named = [{"name": name, "token": token, **({"role": ROLES[name]} if name in ROLES else {})}
             for name, token in TOKENS.items()]
    settings = load_settings(environ={"DEERFLOW_WEB_TOKENS": json.dumps(named)})
    try:
        async with api_server(client, settings) as url:
            yield url
    finally:
        worker.stop()


def as_(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


async def started_and_awaiting_review(http: httpx.AsyncClient, base: str, who: str) -> str:
    response = await http.post(f"{base}/api/runs", json={"question": QUESTION}, headers=as_(who))
    assert response.status_code == 200, response.text
    run: str = response.json()["id"]
    deadline = time.monotonic() + 60
    while (await show(http, base, run, who))["run"]["awaiting"] != "plan_feedback":
        assert time.monotonic() < deadline, "the run never awaited review"
        await asyncio.sleep(0.3)
    return run


async def show(http: httpx.AsyncClient, base: str, run: str, who: str) -> Any:
    response = await http.get(f"{base}/api/runs/{run}", headers=as_(who))
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_token_sees_and_acts_on_its_own_runs_only(base: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        run = await started_and_awaiting_review(http, base, "alice")
        listed = {name: [r["id"] for r in (await http.get(f"{base}/api/runs", headers=as_(name))).json()["runs"]]
                  for name in TOKENS}
        assert run in listed["alice"] and run in listed["rita"] and run in listed["vera"]
        assert run not in listed["bob"]
        for method, path in (("GET", ""), ("GET", "/events"), ("POST", "/review"), ("POST", "/cancel")):
            refused = await http.request(method, f"{base}/api/runs/{run}{path}", headers=as_("bob"),
                                         json={"accept": True} if path == "/review" else None)
            assert refused.status_code == 404, (path, refused.text)  # not even told that it exists
        assert (await http.post(f"{base}/api/runs/{run}/cancel", headers=as_("alice"))).status_code == 200


async def test_a_viewer_reads_but_may_not_review_start_or_cancel(base: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        run = await started_and_awaiting_review(http, base, "alice")
        assert (await show(http, base, run, "vera"))["run"]["awaiting"] == "plan_feedback"
        for path, body in ((f"/api/runs/{run}/review", {"accept": True}), (f"/api/runs/{run}/cancel", None),
                           ("/api/runs", {"question": QUESTION})):
            refused = await http.post(f"{base}{path}", json=body, headers=as_("vera"))
            assert refused.status_code == 403 and "may only read" in refused.text, (path, refused.text)
        assert (await show(http, base, run, "alice"))["run"]["awaiting"] == "plan_feedback"
        await http.post(f"{base}/api/runs/{run}/cancel", headers=as_("alice"))


async def test_a_reviewer_reviews_anyones_run_and_the_record_names_it(base: str, dev_server: DevServer) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        run = await started_and_awaiting_review(http, base, "alice")
        refused = await http.post(f"{base}/api/runs/{run}/cancel", headers=as_("rita"))
        assert refused.status_code == 403, refused.text  # a reviewer cancels only its own runs
        accepted = await http.post(f"{base}/api/runs/{run}/review", json={"accept": True}, headers=as_("rita"))
        assert accepted.status_code == 200, accepted.text
        deadline = time.monotonic() + 90
        while (shown := await show(http, base, run, "alice"))["result"] is None:
            assert time.monotonic() < deadline, "the run never finished"
            await asyncio.sleep(0.5)
    rita = {"name": "rita", "via": "api"}
    assert [(d["kind"], d["by"]) for d in shown["result"]["decisions"]] == [("plan_review", rita)]
    assert shown["run"]["plan_history"][-1]["review"]["by"] == rita
    assert query_status(dev_server, run)["decisions"][0]["by"] == rita  # as the temporal CLI reads it


async def test_without_a_known_token_nothing_is_answered(base: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await http.get(f"{base}/api/runs")
        assert refused.status_code == 401
        # Only named tokens are configured here: the answer names them, not DEERFLOW_WEB_TOKEN.
        assert refused.json()["detail"].endswith("Bearer <a token of DEERFLOW_WEB_TOKENS>"), refused.text
        wrong = await http.get(f"{base}/api/runs", headers={"Authorization": "Bearer alice-token-01234567890"})
        assert wrong.status_code == 401


@pytest.mark.parametrize(("single", "named", "told", "said"), [
    (None, True, "a token of DEERFLOW_WEB_TOKENS",
     "4 token(s): alice (its own runs only), bob (its own runs only), rita (reviewer), vera (viewer)"),
    ("single-token-0123456789", False, "DEERFLOW_WEB_TOKEN", "1 token(s): operator (admin)"),
    ("single-token-0123456789", True, "DEERFLOW_WEB_TOKEN or a token of DEERFLOW_WEB_TOKENS", "5 token(s): alice"),
    (None, False, "DEERFLOW_WEB_TOKEN", "no token: callers on loopback only, each as the local admin"),
])
def test_the_server_names_the_token_settings_it_uses_and_its_holders(single: str | None, named: bool, told: str,
                                                                      said: str) -> None:
    holders = [{"name": name, "token": token, **({"role": ROLES[name]} if name in ROLES else {})}
               for name, token in TOKENS.items()]
    settings = load_settings(environ={**({"DEERFLOW_WEB_TOKEN": single} if single else {}),
                                      **({"DEERFLOW_WEB_TOKENS": json.dumps(holders)} if named else {})})
    assert token_setting(settings) == told
    assert holders_said(settings).startswith(said) and "token-0123456789" not in holders_said(settings)


async def test_a_budget_pause_is_decided_through_the_api_by_a_reviewer(base: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        started = await http.post(f"{base}/api/runs", headers=as_("alice"),
                                  json={"question": QUESTION, "auto_accept_plan": True, "token_budget": 7000})
        run = started.json()["id"]
        deadline = time.monotonic() + 60
        while (await show(http, base, run, "alice"))["run"]["awaiting"] != "budget":
            assert time.monotonic() < deadline, "the run never paused at its budget"
            await asyncio.sleep(0.3)
        viewer = await http.post(f"{base}/api/runs/{run}/budget", json={"action": "finish"}, headers=as_("vera"))
        assert viewer.status_code == 403, viewer.text
        finished = await http.post(f"{base}/api/runs/{run}/budget", json={"action": "finish"}, headers=as_("rita"))
        assert finished.status_code == 200, finished.text
        while (shown := await show(http, base, run, "alice"))["result"] is None:
            assert time.monotonic() < deadline + 60, "the run never finished"
            await asyncio.sleep(0.5)
    assert shown["result"]["budget"]["cut_short"]
    assert [(d["kind"], d["by"]["name"]) for d in shown["result"]["decisions"]] == [("budget", "rita")]
