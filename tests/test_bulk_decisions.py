"""Lists and decisions on many runs at once (issue #46), end to end: the dev server, a real worker
process, the API server with named tokens (alice and bob see their own runs, rita reviews, vera
views, adam is an admin) and the CLI.

Each test names its runs by a word of its own in their questions and filters by it, so the tests of
this module see only their own runs on the shared server. Runs reach their plan review on the
bundled offline model at once.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionStatus

from cli import bulk
from config.settings import Settings, load_settings
from runtime import research_client
from runtime.bulk_decisions import BulkOutcome, Verdict, accept_plan, decision_id, matching
from runtime.converter import data_converter
from runtime.memo_listing import memo_rows
from runtime.run_listing import RunFilter, list_page
from runtime.run_memo import QUESTION as QUESTION_MEMO
from runtime.run_memo import STARTED_BY, actor_in, indexes_questions, run_memo, usage_in
from runtime.visibility_query import all_of, quoted
from tests.support.processes import DevServer, WorkerProcess, run_starter, start_worker
from tests.support.runs import run_id
from tests.support.web_server import api_server
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest
from workflows.contracts.status import RunStatus
from workflows.contracts.usage import Usage
from workflows.research.visibility import USAGE_MEMO

pytestmark = pytest.mark.timeout(300)

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789", "rita": "rita-token-0123456789",
          "vera": "vera-token-0123456789", "adam": "adam-token-0123456789"}
ROLES = {"rita": "reviewer", "vera": "viewer", "adam": "admin"}
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bulk")


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, home: Path) -> AsyncIterator[WorkerProcess]:
    started = await start_worker(dev_server, client, home / "worker.log", DEERFLOW_HOME=str(home))
    yield started
    started.stop()


@pytest.fixture(scope="module")
async def base(worker: WorkerProcess, client: Client) -> AsyncIterator[str]:
    named = [{"name": name, "token": token, **({"role": ROLES[name]} if name in ROLES else {})}
             for name, token in TOKENS.items()]
    async with api_server(client, load_settings(environ={"DEERFLOW_WEB_TOKENS": json.dumps(named)})) as url:
        yield url


def as_(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def tagged() -> str:
    """A word of this test's own, in its runs' questions: its filters find only them."""
    return f"zq{uuid.uuid4().hex[:8]}"


async def start(http: httpx.AsyncClient, base: str, who: str, tag: str, extra: str = "") -> str:
    response = await http.post(f"{base}/api/runs", json={"question": f"{QUESTION} {extra} {tag}"}, headers=as_(who))
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def count(client: Client, tag: str, awaiting: bool, expected: int, timeout: float = 120) -> None:
    """Until the index has ``expected`` runs of ``tag`` awaiting review (or running, when not ``awaiting``)."""
    query = f"DeerFlowQuestion = '{tag}' AND ExecutionStatus = 'Running'"
    query += " AND DeerFlowAwaiting = 'plan_feedback'" if awaiting else ""
    await count_matching(client, query, expected, timeout)


async def listed(http: httpx.AsyncClient, base: str, who: str, **params: Any) -> list[str]:
    """Every run ``who`` is listed, page after page."""
    ids: list[str] = []
    page: str | None = None
    while True:
        response = await http.get(f"{base}/api/runs", params={**params, **({"page": page} if page else {})},
                                  headers=as_(who))
        assert response.status_code == 200, response.text
        ids += [run["id"] for run in response.json()["runs"]]
        if not (page := response.json()["next_page"]):
            return ids


async def post(http: httpx.AsyncClient, base: str, who: str, what: str, body: dict[str, Any]) -> httpx.Response:
    return await http.post(f"{base}/api/runs/{what}", json=body, headers=as_(who))


async def test_lists_page_filter_and_show_each_token_what_it_may_see(base: str, client: Client) -> None:
    tag = tagged()
    async with httpx.AsyncClient(timeout=60) as http:
        alice = [await start(http, base, "alice", tag, "costs") for _ in range(2)] + \
            [await start(http, base, "alice", tag, "recycling")]
        bob = [await start(http, base, "bob", tag, "costs") for _ in range(2)]
        # A run from before runs were indexed by starter: its memo alone says alice started it.
        old = (await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=f"{QUESTION} {tag}"),
                                           id=run_id("unindexed"), task_queue=TASK_QUEUE,
                                           memo=run_memo(QUESTION, Actor(name="alice", via=Via.API)))).id
        await count(client, tag, awaiting=True, expected=5)  # the old run has no question in the index
        assert sorted(await listed(http, base, "alice", question=tag, page_size=2)) == sorted(alice)
        assert old in await listed(http, base, "alice") and old not in await listed(http, base, "bob")
        assert sorted(await listed(http, base, "bob", question=tag)) == sorted(bob)
        assert sorted(await listed(http, base, "rita", question=tag, page_size=2)) == sorted(alice + bob)
        assert sorted(await listed(http, base, "vera", question=f"{tag} costs")) == sorted(alice[:2] + bob)
        assert sorted(await listed(http, base, "adam", question=tag, started_by="bob")) == sorted(bob)
        assert await listed(http, base, "rita", question=tag, awaiting="plan_feedback", older_than=3600) == []
        first = (await http.get(f"{base}/api/runs", params={"question": tag, "page_size": 1},
                                headers=as_("rita"))).json()
        assert len(first["runs"]) == 1 and first["next_page"]
        # Her starter is part of alice's query: a page of one is one of hers, though bob's runs are newer.
        own = (await http.get(f"{base}/api/runs", params={"question": tag, "page_size": 1},
                              headers=as_("alice"))).json()
        assert [run["id"] for run in own["runs"]] == [alice[-1]], own
        # A query of alice's own cannot reach past her runs, however it is written.
        for widening in ("DeerFlowStartedBy IS NOT NULL OR DeerFlowStartedBy IS NULL",
                         "DeerFlowStartedBy = 'api:bob' OR WorkflowType = 'DeepResearchWorkflow'",
                         "NOT (DeerFlowStartedBy = 'api:alice')"):
            assert set(await listed(http, base, "alice", question=tag, query=widening)) <= set(alice), widening
        # A filter's values (who started it, the question's words) are values, however they are written.
        for value in ("x') OR (HistoryLength >= 0) --", "\\') OR (HistoryLength >= 0) --", "a\\", "o'brien --"):
            assert await listed(http, base, "alice", question=tag, started_by=value) == [], value
            assert await listed(http, base, "alice", question=f"{tag} {value}") == [], value
        control = await http.get(f"{base}/api/runs", params={"started_by": "x\n-- "}, headers=as_("alice"))
        assert control.status_code == 400 and "started_by" in control.text, control.text
        for hostile in ("x = 'a') OR (y = 'b') --", f"DeerFlowQuestion = '{tag}') OR (WorkflowId != '') --",
                        "DeerFlowStartedBy = 'api:alice' -- ", "`x` = 'a'",
                        "x = 'a\\\\' OR y = 'b'"):
            refused = await http.get(f"{base}/api/runs", params={"query": hostile}, headers=as_("alice"))
            assert refused.status_code == 400 and "query" in refused.text, (hostile, refused.text)
        unknown = await http.get(f"{base}/api/runs", params={"query": "NoSuchAttribute = 'x'"}, headers=as_("rita"))
        assert unknown.status_code == 400 and "NoSuchAttribute" in unknown.text, unknown.text
        bad_page = await http.get(f"{base}/api/runs", params={"page": "not a token!"}, headers=as_("rita"))
        assert bad_page.status_code == 400, bad_page.text
        cancelled = await post(http, base, "adam", "cancel-all", {"question": tag})
        assert cancelled.json()["decided"] == 5, cancelled.text
        await client.get_workflow_handle(old).cancel()


async def test_a_quoted_value_stays_one_value_on_the_server(client: Client) -> None:
    """runtime/visibility_query.py ``quoted``: with only its quotes doubled, a value ending a backslash
    before them (``\\') OR (WorkflowId != ') --``) would close the literal and the clause, and widen the query to every
    run; escaped, the query parses and the value matches nothing."""
    bystander = await client.start_workflow("NoSuchWorkflow", id=run_id("bystander"), task_queue="no-such-queue")
    try:
        await count_matching(client, f"WorkflowId = {quoted(bystander.id)}", 1)
        for value in ("\\') OR (WorkflowId != ') --", "a\\", "x' OR 'a' = 'a", "\\' OR WorkflowId != '--\n"):
            query = all_of(f"WorkflowType = {quoted('none')}", f"WorkflowId = {quoted(value)}")
            assert [execution.id async for execution in client.list_workflows(query, limit=5)] == [], value
    finally:
        await bystander.terminate()


async def count_matching(client: Client, query: str, expected: int, timeout: float = 60) -> None:
    """Until the index has ``expected`` runs matching ``query``."""
    deadline = time.monotonic() + timeout
    while (found := (await client.count_workflows(query)).count) != expected:
        assert time.monotonic() < deadline, f"{found} runs match {query}, not {expected}"
        await asyncio.sleep(0.5)


async def test_bulk_review_decides_what_each_token_may_decide_in_its_name(base: str, client: Client) -> None:
    tag = tagged()
    async with httpx.AsyncClient(timeout=120) as http:
        alice = [await start(http, base, "alice", tag, "costs"), await start(http, base, "alice", tag, "costs"),
                 await start(http, base, "alice", tag, "recycling")]
        bob = [await start(http, base, "bob", tag)]
        await count(client, tag, awaiting=True, expected=4)
        viewer = await post(http, base, "vera", "review-all", {"accept": True, "question": tag})
        assert viewer.status_code == 403, viewer.text
        edit = await post(http, base, "alice", "review-all", {"accept": False, "question": tag})
        assert edit.status_code == 400, edit.text
        mine = await post(http, base, "bob", "review-all", {"accept": True, "question": tag})
        assert mine.json() == {"decided": 1, "skipped": 0, "refused": 0, "pending": 0, "failed": 0,
                               "notes": []}, mine.text
        costs = await post(http, base, "alice", "review-all", {"accept": True, "question": f"{tag} costs"})
        assert costs.json()["decided"] == 2, costs.text
        await count(client, tag, awaiting=True, expected=1)
        rest = await post(http, base, "rita", "review-all", {"accept": True, "question": tag})
        assert rest.json()["decided"] == 1, rest.text  # a reviewer decides anyone's
    deciders = {run: (await research_client.status(client.get_workflow_handle(run))).decisions[0].by
                for run in alice + bob}
    assert deciders == {alice[0]: Actor(name="alice", via=Via.API), alice[1]: Actor(name="alice", via=Via.API),
                        alice[2]: Actor(name="rita", via=Via.API), bob[0]: Actor(name="bob", via=Via.API)}
    for run in alice + bob:
        await client.get_workflow_handle(run).result()


async def test_bulk_cancel_refuses_what_a_reviewer_may_not_cancel(base: str, client: Client) -> None:
    tag = tagged()
    async with httpx.AsyncClient(timeout=120) as http:
        alice = [await start(http, base, "alice", tag), await start(http, base, "alice", tag)]
        bob = [await start(http, base, "bob", tag)]
        rita = [await start(http, base, "rita", tag)]
        await count(client, tag, awaiting=True, expected=4)
        everything = await post(http, base, "alice", "cancel-all", {})
        assert everything.status_code == 400, everything.text
        reviewer = (await post(http, base, "rita", "cancel-all", {"question": tag})).json()
        assert (reviewer["decided"], reviewer["refused"]) == (1, 3), reviewer
        assert {note["id"] for note in reviewer["notes"]} == set(alice + bob)
        assert all("'rita' (reviewer) may not cancel" in note["reason"] for note in reviewer["notes"])
        own = (await post(http, base, "alice", "cancel-all", {"query": f"DeerFlowQuestion = '{tag}'"})).json()
        # bob's: not seen
        assert own == {"decided": 2, "skipped": 0, "refused": 0, "pending": 0, "failed": 0, "notes": []}, own
        await count(client, tag, awaiting=False, expected=1)
    for run in alice + rita:
        assert (await client.get_workflow_handle(run).describe()).status == WorkflowExecutionStatus.CANCELED
    status = await research_client.status(client.get_workflow_handle(alice[0]))
    assert [(d.kind, d.by) for d in status.decisions] == [("cancel", Actor(name="alice", via=Via.API))]
    await client.get_workflow_handle(bob[0]).cancel()


async def test_a_decision_on_a_run_that_moved_on_is_skipped_with_why(base: str, client: Client) -> None:
    tag = tagged()
    async with httpx.AsyncClient(timeout=120) as http:
        run = await start(http, base, "alice", tag)
        await count(client, tag, awaiting=True, expected=1)
        carol = Actor(name="carol", via=Via.CLI)
        assert (await accept_plan(client, run, carol, 30))[0] is Verdict.DECIDED
        again = await accept_plan(client, run, carol, 30)
        assert again[0] is Verdict.SKIPPED and "not waiting" in again[1], again
        await client.get_workflow_handle(run).result()
        ended = await accept_plan(client, run, carol, 30)
        assert ended == (Verdict.SKIPPED, "it has ended"), ended


async def test_the_cli_lists_pages_reviews_and_cancels_by_filter(base: str, dev_server: DevServer, client: Client,
                                                                  home: Path) -> None:
    tag = tagged()
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "DEERFLOW_HOME": str(home)}
    for index in range(3):
        started = await asyncio.to_thread(run_starter, env, "run", f"{QUESTION} {tag}", "--no-wait",
                                          "--as", "dora" if index else "ed")
        assert started.returncode == 0, started.stderr
    await count(client, tag, awaiting=True, expected=3)
    first = await asyncio.to_thread(run_starter, env, "list", "--question", tag, "--limit", "2")
    assert first.returncode == 0 and len(first.stdout.splitlines()) == 3, first.stdout
    token = first.stderr.split("--page ", 1)[1].split()[0]
    rest = await asyncio.to_thread(run_starter, env, "list", "--question", tag, "--limit", "2", "--page", token)
    assert len(rest.stdout.splitlines()) == 2 and "More runs" not in rest.stderr, (rest.stdout, rest.stderr)
    assert "awaiting_review" in rest.stdout and "tokens" in rest.stdout and "(cli)" in rest.stdout
    hostile = await asyncio.to_thread(run_starter, env, "list", "--query", "x = 'a') OR (y = 'b') --")
    assert hostile.returncode == 2 and "--query" in hostile.stderr, hostile.stderr
    counted = await asyncio.to_thread(run_starter, env, "review", "--all-awaiting", "--accept", "--question", tag,
                                      "--started-by", "dora", "--dry-run")
    assert counted.stdout.startswith("2 run(s)"), counted.stdout
    accepted = await asyncio.to_thread(run_starter, env, "review", "--all-awaiting", "--accept", "--question", tag,
                                       "--started-by", "dora", "--as", "frank")
    assert accepted.returncode == 0 and accepted.stdout.startswith("2 plan(s) accepted, 0 skipped"), accepted.stdout
    await count(client, tag, awaiting=True, expected=1)
    cancelled = await asyncio.to_thread(run_starter, env, "cancel", "--question", tag, "--awaiting", "plan_feedback",
                                        "--as", "frank")
    assert cancelled.returncode == 0 and cancelled.stdout.startswith("1 cancelled"), cancelled.stdout
    ended = await asyncio.to_thread(run_starter, env, "list", "--question", tag, "--started-by", "ed (cli)")
    assert ended.stdout.splitlines()[1].split()[1] == "cancelled", ended.stdout
    ed = ended.stdout.splitlines()[1].split()[0]
    status: RunStatus = await research_client.status(client.get_workflow_handle(ed))
    assert status.decisions[-1].by == Actor(name="frank", via=Via.CLI)
    spent = await asyncio.to_thread(run_starter, env, "costs", "--question", tag)
    assert spent.returncode == 0 and spent.stdout.startswith("Runs started since") and " 3 runs · " in spent.stdout


async def test_a_listing_read_for_its_memos_reads_what_the_sdk_reads_and_a_bad_field_hides_no_other(
        dev_server: DevServer, tmp_path: Path) -> None:
    """runtime/memo_listing.py (what ``costs`` sums): the memo fields of a whole listing decoded in one call
    of one converter read as the SDK's own binding to each run reads them, encrypted ones included; a field
    anyone wrote that no decoding reads is left out of its run alone (one decode call would fail them all)."""
    settings = Settings(DEERFLOW_HOME=tmp_path, DEERFLOW_ENCRYPTION_KEYS=f"k1:{base64.b64encode(bytes(32)).decode()}")
    sealed = await Client.connect(dev_server.address, data_converter=data_converter(settings))
    tag = tagged()
    spent = Usage(llm_calls=3, total_tokens=1234, cost_usd=0.5)
    broken = Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")
    started = [await sealed.start_workflow("NoSuchWorkflow", id=run_id(tag), task_queue="no-such-queue", memo=memo)
               for memo in ({STARTED_BY: {"name": "ann", "via": "api"}, USAGE_MEMO: spent.model_dump(mode="json")},
                            {STARTED_BY: broken, USAGE_MEMO: spent.model_dump(mode="json")},
                            {QUESTION_MEMO: "no spend"})]
    query = f"WorkflowId STARTS_WITH {quoted(f'{tag}-')}"
    try:
        await count_matching(sealed, query, 3)
        rows = {row.id: row for row in await memo_rows(sealed, query, (STARTED_BY, USAGE_MEMO))}
        listed = {execution.id: execution async for execution in sealed.list_workflows(query)}
        assert rows.keys() == listed.keys() == {handle.id for handle in started}
        first, second, third = (rows[handle.id] for handle in started)
        assert first.memo == {STARTED_BY: await listed[first.id].memo_value(STARTED_BY),
                              USAGE_MEMO: await listed[first.id].memo_value(USAGE_MEMO)}
        assert usage_in(first.memo[USAGE_MEMO]) == spent
        assert actor_in(first.memo[STARTED_BY]) == Actor(name="ann", via=Via.API)
        assert second.memo == {USAGE_MEMO: first.memo[USAGE_MEMO]}  # its starter unreadable, its spend read
        assert third.memo == {} and (first.status, first.workflow_type) == (listed[first.id].status, "NoSuchWorkflow")
        raw = (await sealed.workflow_service.describe_workflow_execution(DescribeWorkflowExecutionRequest(
            namespace=sealed.namespace, execution=WorkflowExecution(workflow_id=first.id))))
        assert raw.workflow_execution_info.memo.fields[USAGE_MEMO].metadata["encoding"] == b"binary/encrypted"
    finally:
        for handle in started:
            await handle.terminate()


async def test_where_questions_are_not_indexed_lists_and_bulk_decisions_read_them_past_a_broken_memo(
        dev_server: DevServer, tmp_path: Path) -> None:
    """Encrypted payloads: the index keeps no questions, so a list's page and the runs a bulk decision
    acts on are held to a question filter by each run's memo (``RunFilter.keeps_question``), read with
    one converter (runtime/memo_listing.py). A question anyone wrote that no decoding reads lists its
    run without one; it fails neither the page nor the decision's listing (it did both)."""
    settings = Settings(DEERFLOW_HOME=tmp_path, DEERFLOW_ENCRYPTION_KEYS=f"k1:{base64.b64encode(bytes(32)).decode()}")
    sealed = await Client.connect(dev_server.address, data_converter=data_converter(settings))
    assert not indexes_questions(sealed)
    tag = tagged()
    broken = Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")
    started = [await sealed.start_workflow(WORKFLOW_TYPE, id=run_id(tag), task_queue="no-such-queue", memo=memo)
               for memo in ({QUESTION_MEMO: f"pumps {tag}"}, {QUESTION_MEMO: f"valves {tag}"},
                            {QUESTION_MEMO: broken}, {})]
    query = f"WorkflowId STARTS_WITH {quoted(f'{tag}-')}"
    try:
        await count_matching(sealed, query, len(started))
        pumps = await matching(sealed, RunFilter(question=f"pumps {tag}", query=query))
        assert [run.id for run in pumps] == [started[0].id]
        page = await list_page(sealed, RunFilter(query=query).visibility_query(question_indexed=False), 10)
        assert {run.id: run.question for run in page.runs} == {
            started[0].id: f"pumps {tag}", started[1].id: f"valves {tag}", started[2].id: None, started[3].id: None}
    finally:
        for handle in started:
            await handle.terminate()


FLEET = 50
FROZEN = 5  # of the fleet, decided while no worker can take a workflow task


async def test_fifty_runs_pause_are_listed_and_approved_at_once_and_each_completes_exactly_once(
        base: str, client: Client, worker: WorkerProcess, dev_server: DevServer, home: Path) -> None:
    """The fleet bench's small version (bench/fleet.py, issue #46): 50 runs started through the API pause
    at their review, every list answers, one ``review-all`` accepts them all, each completes exactly once.
    A decision no worker could confirm in time is reported pending (the server holds it), not failed,
    and the same ``request_id`` again attaches to it: it decides nothing twice."""
    tag, env = tagged(), {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "DEERFLOW_HOME": str(home)}
    gate = asyncio.Semaphore(8)

    async def one(http: httpx.AsyncClient, number: int) -> str:
        async with gate:
            return await start(http, base, "alice", tag, f"frozen{tag}" if number < FROZEN else "")

    async with httpx.AsyncClient(timeout=120) as http:
        runs = await asyncio.gather(*(one(http, number) for number in range(FLEET)))
        await count(client, tag, awaiting=True, expected=FLEET, timeout=600)
        assert sorted(await listed(http, base, "rita", question=tag, awaiting="plan_feedback")) == sorted(runs)
        listing = await asyncio.to_thread(run_starter, env, "list", "--question", tag, "--limit", "100")
        assert listing.returncode == 0 and len(listing.stdout.splitlines()) == FLEET + 1, listing.stdout
        spent = await asyncio.to_thread(run_starter, env, "costs", "--question", tag)
        assert spent.returncode == 0 and f" {FLEET} runs · " in spent.stdout, spent.stdout
        request = {"accept": True, "question": tag, "request_id": f"fleet-{tag}"}
        assert worker.process is not None
        os.killpg(worker.process.pid, signal.SIGSTOP)
        try:
            held = (await post(http, base, "rita", "review-all",
                               {**request, "question": f"{tag} frozen{tag}", "wait_seconds": 10})).json()
        finally:
            os.killpg(worker.process.pid, signal.SIGCONT)
        assert (held["pending"], held["decided"], held["failed"]) == (FROZEN, 0, 0), held
        assert all(note["verdict"] == "pending" and "server holds it" in note["reason"] for note in held["notes"])
        every = (await post(http, base, "rita", "review-all", request)).json()
        # Every run still listed is decided (the held ones by their first update, attached to, not refused),
        # or pending where the loaded worker, busy with the research of those accepted, took longer than 60 s.
        assert every["decided"] + every["pending"] >= FLEET - FROZEN, every
        assert every["skipped"] == every["failed"] == 0, every
    rita, held_runs = Actor(name="rita", via=Via.API), runs[:FROZEN]
    same = decision_id(rita, request["request_id"])
    for run in held_runs:  # the same decision again reads what became of it (ended or not): its plan accepted
        assert (await accept_plan(client, run, rita, 60, same))[0] is Verdict.DECIDED
    assert (await accept_plan(client, held_runs[0], rita, 60))[0] is Verdict.SKIPPED  # a new one: refused
    for run in runs:
        await asyncio.wait_for(client.get_workflow_handle(run).result(), 600)
        kinds = [event.event_type for event in (await client.get_workflow_handle(run).fetch_history()).events]
        assert (kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED),
                kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)) == (1, 1), run


def test_the_cli_exits_on_a_failed_decision_and_apart_on_a_pending_one(capsys: pytest.CaptureFixture[str]) -> None:
    """cli/bulk.py: a script tells "act" (1: a review the server does not hold) from "look again later"
    (75, EX_TEMPFAIL: sent, not yet confirmed) and from done (0)."""
    pending = BulkOutcome(decided=3)
    pending.count("run-a", Verdict.PENDING, "sent: the server holds it for the run")
    assert bulk._report(pending, "plan(s) accepted") == bulk.EXIT_PENDING == 75
    assert capsys.readouterr().out.startswith("3 plan(s) accepted, 0 skipped, 0 refused, 1 pending, 0 failed")
    pending.count("run-b", Verdict.FAILED, "the server no longer holds it")
    assert bulk._report(pending, "plan(s) accepted") == 1
    assert bulk._report(BulkOutcome(decided=2, skipped=1), "plan(s) accepted") == 0
