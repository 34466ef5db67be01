"""Tenancy with named tokens (issue #42 §3), on ``starter.py serve`` as its own process, a real worker
process and the dev server.

Seen before: a reviewer posted a new question on alice's DeerFlow thread, which started run ``.2`` of
her thread as the reviewer, and alice's next turn got "no such research run"; alice's upload was listed
to bob, and a run of bob's naming it was accepted. Now a thread is its first run's starter's (others
act on its runs as their role allows, never start one on it), and an upload is its uploader's (admins
see all; a shared team folder only where the operator sets one).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError

from config.groups.web import Role
from config.settings import load_settings
from runtime import research_client
from runtime.run_memo import started_by
from server.access import Principal
from server.uploads import Uploads
from tests.support.processes import DevServer, ServeProcess, WorkerProcess, free_port, start_worker
from tests.support.web_server import parse_sse
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest

pytestmark = pytest.mark.timeout(240)

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789",
          "rita": "rita-token-0123456789", "ada": "ada-token-01234567890", "vera": "vera-token-0123456789"}
ROLES = {"rita": "reviewer", "ada": "admin", "vera": "viewer"}
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
PREFIX = "deerflow-web-"
NOTE = b"# Fleet trial\n\nSodium-ion packs kept 91% capacity after 2,000 cycles.\n"


@dataclass
class Stack:
    url: str
    client: Client
    root: Path


def as_(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[name]}"}


def serving(dev_server: DevServer, folder: Path, home: str = "home", **env: str) -> ServeProcess:
    """``starter.py serve`` with the tokens; ``home`` its own (shared with the worker: the blob store)."""
    named = [{"name": name, "token": token, **({"role": ROLES[name]} if name in ROLES else {})}
             for name, token in TOKENS.items()]
    server = ServeProcess(dev_server.address, free_port(), folder / f"serve-{home}.log", folder / home,
                          env={"DEERFLOW_WEB_TOKENS": json.dumps(named), **env})
    deadline = time.monotonic() + 30
    while b"Uvicorn running" not in (folder / f"serve-{home}.log").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    return server


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tenancy")


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, folder: Path) -> Iterator[WorkerProcess]:
    (folder / "resources").mkdir()
    process = await start_worker(dev_server, client, folder / "worker.log", DEERFLOW_HOME=str(folder / "home"),
                                 DEERFLOW_RESOURCE_ROOTS=str(folder / "resources"))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def stack(dev_server: DevServer, client: Client, worker: WorkerProcess, folder: Path) -> Iterator[Stack]:
    server = serving(dev_server, folder, DEERFLOW_RESOURCE_ROOTS=str(folder / "resources"))
    yield Stack(server.url, client, folder / "resources")
    server.kill()


def turn(thread: str, text: str, **fields: object) -> dict:
    return {"messages": [{"role": "user", "content": text}], "thread_id": thread, "auto_accepted_plan": False,
            **fields}


async def chat(stack: Stack, who: str, body: dict) -> list[tuple[str, dict]]:
    async with httpx.AsyncClient(timeout=120) as http:
        response = await http.post(f"{stack.url}/api/chat/stream", json=body, headers=as_(who))
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def error_of(events: list[tuple[str, dict]]) -> str:
    assert [kind for kind, _ in events] == ["error"], events
    return str(events[0][1]["error"])


async def starter_of(client: Client, workflow_id: str) -> str | None:
    actor = await started_by(await client.get_workflow_handle(workflow_id).describe())
    return actor.name if actor else None


async def exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return True


async def test_only_the_threads_owner_starts_runs_on_it_others_act_as_their_role_allows(stack: Stack) -> None:
    thread = "alices-thread"
    first = await chat(stack, "alice", turn(thread, QUESTION))
    assert first[-1][0] == "interrupt", first[-3:]
    for who in ("rita", "ada"):  # a reviewer and an admin may see the thread: refused by name
        refused = error_of(await chat(stack, who, turn(thread, "Ask something else on alice's thread")))
        assert "this thread was started by 'alice'" in refused and "start a new chat" in refused, refused
    assert error_of(await chat(stack, "bob", turn(thread, "hello"))) == "no such research run"  # may not see it
    assert not await exists(stack.client, f"{PREFIX}{thread}.2")

    accepted = await chat(stack, "rita", turn(thread, "ok", interrupt_feedback="accepted"))  # reviewing is hers
    assert accepted and accepted[-1][0] != "error", accepted[-3:]
    second = await chat(stack, "alice", turn(thread, "And what about sodium-ion batteries?"))
    assert second[-1][0] == "interrupt", second[-3:]
    assert await starter_of(stack.client, f"{PREFIX}{thread}.2") == "alice"


async def test_a_thread_taken_over_before_is_its_owners_again(stack: Stack) -> None:
    """A run ``.2`` a reviewer started on alice's thread before the rule: alice still asks on it."""
    thread = "taken-over"
    assert (await chat(stack, "alice", turn(thread, QUESTION)))[-1][0] == "interrupt"
    await research_client.start(stack.client, ResearchRequest(question=QUESTION), run_id=f"{PREFIX}{thread}.2",
                                summary="taken over", started_by=Actor(name="rita", via=Via.API))
    resumed = await chat(stack, "alice", turn(thread, "And what about sodium-ion batteries?"))
    assert resumed[-1][0] == "interrupt", resumed[-3:]
    assert await starter_of(stack.client, f"{PREFIX}{thread}.3") == "alice"


async def upload(stack: Stack, who: str, name: str) -> str:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{stack.url}/api/rag/upload", files={"file": (name, NOTE, "text/markdown")},
                                   headers=as_(who))
    assert response.status_code == 200, response.text
    uri: str = response.json()["uri"]
    return uri


async def listed(stack: Stack, who: str) -> set[str]:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.get(f"{stack.url}/api/rag/resources", headers=as_(who))
    assert response.status_code == 200, response.text
    return {item["uri"] for item in response.json()["resources"]}


async def start(stack: Stack, who: str, resources: list[str]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{stack.url}/api/runs", json={"question": QUESTION, "resources": resources},
                               headers=as_(who))


async def test_an_upload_is_its_uploaders_and_the_admins(stack: Stack) -> None:
    mine = await upload(stack, "alice", "alices fleet trial.md")
    assert mine == "local://uploads/alice/alices-fleet-trial.md"
    path = str(stack.root / "uploads" / "alice" / "alices-fleet-trial.md")
    operators = "local://handbook.md"  # the operator's own document: everyone's
    (stack.root / "handbook.md").write_bytes(NOTE)
    assert {mine, operators} <= await listed(stack, "alice")
    assert {mine, operators} <= await listed(stack, "ada")
    for other in ("bob", "rita"):
        seen = await listed(stack, other)
        assert mine not in seen and operators in seen, (other, seen)

    for named in (mine, path, Path(path).as_uri(), "local://uploads/bob/../alice", "local://uploads/bob/%2E%2E/alice",
                  str(stack.root / "uploads" / "bob" / ".." / "alice"), str(stack.root), str(stack.root / "uploads"),
                  "local://uploads"):
        refused = await start(stack, "bob", [named])
        assert refused.status_code == 403 and "another token" in refused.json()["detail"], (named, refused.text)
        chat_refused = error_of(await chat(stack, "bob", turn(f"bobs-{len(named)}", QUESTION,
                                                              resources=[{"uri": named, "title": "x"}])))
        assert "another token" in chat_refused, chat_refused
    for who in ("alice", "ada"):
        started = await start(stack, who, [mine])
        assert started.status_code == 200, started.text
        await stack.client.get_workflow_handle(started.json()["id"]).terminate()
    theirs = await upload(stack, "bob", "fleet trial.md")  # the same name: a folder of bob's own
    assert theirs == "local://uploads/bob/fleet-trial.md"
    assert theirs not in await listed(stack, "alice")


async def test_a_shared_team_folder_only_where_the_operator_sets_one(dev_server: DevServer, worker: WorkerProcess,
                                                                    client: Client, folder: Path) -> None:
    team = folder / "resources" / "team"
    server = serving(dev_server, folder, "team-home", DEERFLOW_RESOURCE_ROOTS=str(folder / "resources"),
                     DEERFLOW_WEB_TEAM_UPLOAD_DIR=str(team))
    try:
        stack = Stack(server.url, client, folder / "resources")
        shared = await upload(stack, "alice", "team notes.md")
        assert shared == "local://team/team-notes.md"
        assert shared in await listed(stack, "bob")
        started = await start(stack, "bob", [shared])
        assert started.status_code == 200, started.text
        await client.get_workflow_handle(started.json()["id"]).terminate()
    finally:
        server.kill()


def test_who_may_use_which_document(tmp_path: Path) -> None:
    """The rule itself (server/uploads.py), path by path."""
    root = tmp_path / "resources"
    settings = load_settings({"DEERFLOW_RESOURCE_ROOTS": str(root), "DEERFLOW_CONF": str(tmp_path / "absent.yaml")})
    uploads = Uploads(settings)
    alice, bob, admin = Principal("alice", None), Principal("bob", Role.REVIEWER), Principal("ada", Role.ADMIN)
    cases = {root / "uploads" / "alice" / "a.md": (True, False, True),
             root / "uploads" / "alice": (True, False, True),
             root / "uploads" / "old.md": (False, False, True),  # from before: no owner, the admins'
             root / "uploads": (False, False, True),  # a folder holding every token's uploads
             root: (False, False, True),
             root / "handbook.md": (True, True, True),  # the operator's
             root / "uploads-not" / "x.md": (True, True, True)}
    for path, expected in cases.items():
        assert tuple(uploads.may_use(path.resolve(), who) for who in (alice, bob, admin)) == expected, path
    team = Uploads(settings.model_copy(update={"web_team_upload_dir": root / "uploads" / "team"}))
    assert team.may_use((root / "uploads" / "team" / "t.md").resolve(), bob)
    assert team.folder(bob) == (root / "uploads" / "team").resolve()
    assert uploads.folder(bob) == (root / "uploads" / "bob").resolve()


async def test_a_thread_whose_first_run_records_no_starter_is_the_admins(stack: Stack) -> None:
    thread = "no-starter"
    first = await stack.client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION),
                                              id=f"{PREFIX}{thread}.1", task_queue=TASK_QUEUE)  # no memo
    await first.terminate()
    refused = error_of(await chat(stack, "rita", turn(thread, QUESTION)))
    assert "this thread was not started through the API server" in refused, refused
    assert error_of(await chat(stack, "alice", turn(thread, QUESTION))) == "no such research run"
    assert (await chat(stack, "ada", turn(thread, QUESTION)))[-1][0] == "interrupt"
    assert await starter_of(stack.client, f"{PREFIX}{thread}.2") == "ada"


async def test_a_viewer_never_reads_a_key_used_as_the_model_name(dev_server: DevServer, worker: WorkerProcess,
                                                                folder: Path) -> None:
    """Issue #42 §5: ``GET /api/config`` lists the models to every token, viewers too (DeerFlow's
    settings page); a key the operator put there by mistake (``model: $OPENAI_API_KEY``) is masked."""
    secret = "sk-CANARY-0123456789abcdef"
    conf = folder / "model-is-a-key.yaml"
    conf.write_text("BASIC_MODEL:\n  model: $OPENAI_API_KEY\nREASONING_MODEL:\n  model: r1\n")
    server = serving(dev_server, folder, "config-home", DEERFLOW_CONF=str(conf), OPENAI_API_KEY=secret)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            shown = await http.get(f"{server.url}/api/config", headers=as_("vera"))
    finally:
        server.kill()
    assert shown.status_code == 200, shown.text
    assert shown.json()["models"] == {"basic": ["***"], "reasoning": ["r1"]}
    assert secret not in shown.text and secret not in (folder / "serve-config-home.log").read_text()
