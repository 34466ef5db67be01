"""Queue kinds: names, the worker's ``--queues`` choices and each queue's concurrency limit.

Why: an operator who scales model calls apart from the web tools must get exactly the queues they
name, and a worker must take no more tasks of a kind than its limit (the rest wait on the server
for another worker). A typo must fail at start, not leave a queue unserved.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHistory

import worker
from activities.run_config import main_queue_kinds
from config.settings import Settings
from hosting.registry import build_workers
from tests.support.history_checks import activity_events
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from worker import parse_queues, warm_up
from workflows.calls.activity_options import HEARTBEAT_THROTTLE
from workflows.calls.queues import QUEUE_KINDS, QueueKind, queue_name
from workflows.contracts.research import TASK_QUEUE


def activity_name(bound: object) -> str:
    return getattr(bound, "__temporal_activity_definition").name


async def test_the_warm_up_resumes_garbage_collection_with_the_start_up_frozen() -> None:
    """``python worker.py`` pauses collection while it imports; whatever the warm-up does, it must
    end with collection on (a worker without it would grow without bound), start-up frozen."""
    unused: Any = None  # nothing to warm for a worker serving no queue
    gc.disable()
    try:
        await warm_up((), unused, unused, unused, unused, None)
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.enable()


@pytest.mark.parametrize(("queues", "extracts", "turns"), [
    (("main",), True, True), (("tools",), True, False), (("model",), False, True), (("sandbox",), False, False)])
async def test_only_a_worker_that_extracts_starts_the_fork_server_and_one_with_model_turns_warms_them(
        monkeypatch: pytest.MonkeyPatch, queues: tuple[QueueKind, ...], extracts: bool, turns: bool) -> None:
    """The fork server is a process and 1-3 s of CPU that only crawl_tool and local_search_tool use:
    a model-only worker must not pay for it; the model turn's warm-up asks the provider for its
    context window, which a worker without model turns has no use for. (The preload and the turn's
    own warm-up are stubbed: they are checked in tests/test_worker_startup.py and
    tests/test_context_window.py.)"""
    started: list[object] = []
    warmed: list[bool] = []
    monkeypatch.setattr(worker, "start_fork_server", started.append)
    monkeypatch.setattr(worker, "preload", lambda *_: asyncio.sleep(0))
    sandbox: Any = SimpleNamespace(self_check=lambda: asyncio.sleep(0))
    chat: Any = SimpleNamespace(warm=lambda: asyncio.sleep(0, warmed.append(True)))
    settings: Any = object()
    unused_client: Any = None  # no journal: nothing to reclaim
    try:
        await warm_up(queues, settings, sandbox, chat, unused_client, None)
    finally:
        gc.unfreeze()
    assert started == ([settings] if extracts else [])
    assert warmed == ([True] if turns else [])


async def test_what_a_runs_first_calls_need_is_warmed_before_the_sandbox_and_the_fork_server(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A new user waits for the first plan: its coordinator, background search and planner need the
    model libraries and the search providers, not the sandbox's probe nor the extraction fork server
    (1-3 s of CPU), which took cores from that import when started beside it (issue #45)."""
    done: list[str] = []

    async def preload(*_: object) -> None:
        await asyncio.sleep(0.05)  # the others, started beside it, would come first
        done.append("preload")

    monkeypatch.setattr(worker, "preload", preload)
    monkeypatch.setattr(worker, "start_fork_server", lambda _settings: done.append("fork server"))
    sandbox: Any = SimpleNamespace(self_check=lambda: asyncio.sleep(0, done.append("sandbox probe")))
    chat: Any = SimpleNamespace(warm=lambda: asyncio.sleep(0, done.append("model turns")))
    unused: Any = None  # no journal: nothing to reclaim
    try:
        await warm_up(QUEUE_KINDS, unused, sandbox, chat, unused, None)
    finally:
        gc.unfreeze()
    assert done == ["preload", "model turns", "sandbox probe", "fork server"]


def test_queue_names_derive_from_the_runs_queue() -> None:
    assert [queue_name(kind) for kind in QUEUE_KINDS] == [
        TASK_QUEUE, f"{TASK_QUEUE}-model", f"{TASK_QUEUE}-tools", f"{TASK_QUEUE}-sandbox"]
    assert queue_name("model", "team-a") == "team-a-model"


@pytest.mark.parametrize(("value", "kinds"), [
    ("all", ("main", "model", "tools", "sandbox")),
    ("keyed", ("main", "model", "tools")),
    ("sandbox", ("sandbox",)),
    ("model, tools", ("model", "tools")),
    ("keyed,sandbox,main", ("main", "model", "tools", "sandbox")),
])
def test_queue_choices(value: str, kinds: tuple[str, ...]) -> None:
    assert parse_queues(value) == kinds


@pytest.mark.parametrize("value", ["models", "", "main,,tools", "sandbox;rm"])
def test_an_unknown_queue_is_refused_with_the_choices(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="choose from all, keyed, main, model, tools, sandbox"):
        parse_queues(value)


async def test_each_queue_gets_its_own_worker_and_limit(time_worker: Client, provider_env: dict[str, str]) -> None:
    settings: Settings = settings_with(provider_env, LLM_MAX_CONCURRENCY="3", DEERFLOW_TOOLS_QUEUE_CONCURRENCY="5",
                                       DEERFLOW_SANDBOX_QUEUE_CONCURRENCY="1", DEERFLOW_MAIN_QUEUE_CONCURRENCY="7")
    workers = build_workers(time_worker, settings, ("model", "tools", "sandbox", "main"), main_queue="team-a")
    limits = {worker.task_queue: worker.config()["max_concurrent_activities"] for worker in workers}
    assert limits == {"team-a": 7, "team-a-model": 3, "team-a-tools": 5, "team-a-sandbox": 1}
    assert [bool(worker.config()["workflows"]) for worker in workers] == [True, False, False, False]
    # Beats reach the server often enough for the quick heartbeat timeouts (workflows/calls/activity_options.py).
    assert {worker.config()["max_heartbeat_throttle_interval"] for worker in workers} == {HEARTBEAT_THROTTLE}
    names = {worker.task_queue: {activity_name(fn) for fn in worker.config()["activities"]} for worker in workers}
    assert names["team-a-sandbox"] == {"python_repl_tool"}, "the sandbox's worker holds nothing keyed"
    assert names["team-a-model"] == {"chat"}
    assert "chat" not in names["team-a-tools"] and "python_repl_tool" not in names["team-a-tools"]
    assert names["team-a"] >= names["team-a-model"] | names["team-a-tools"] | names["team-a-sandbox"], \
        "runs recorded before the split schedule everything on the main queue"
    explicit = settings_with(provider_env, LLM_MAX_CONCURRENCY="3", DEERFLOW_MODEL_QUEUE_CONCURRENCY="9")
    (model,) = build_workers(time_worker, explicit, ("model",), main_queue="team-b")
    assert model.config()["max_concurrent_activities"] == 9


def scheduled_queues(history: WorkflowHistory) -> dict[str, str]:
    """Activity type -> the queue its first call was scheduled on."""
    return {events[0].activity_task_scheduled_event_attributes.activity_type.name:
            events[0].activity_task_scheduled_event_attributes.task_queue.name
            for events in activity_events(history).values()}


@pytest.mark.parametrize(("served", "eager", "expected"), [
    (QUEUE_KINDS, "true", ["model", "tools"]),
    (("main", "model"), "true", ["model"]),
    (("main", "sandbox"), "true", []),
    (("model", "tools"), "true", []),  # no workflow here: no run reads its config from this worker
    (QUEUE_KINDS, "false", []),
])
def test_a_run_puts_on_its_main_queue_the_kinds_its_worker_serves_beside_it(
    provider_env: dict[str, str], served: tuple[QueueKind, ...], eager: str, expected: list[str]
) -> None:
    settings = settings_with(provider_env, DEERFLOW_EAGER_ACTIVITIES=eager)
    assert main_queue_kinds(settings, served) == expected


async def test_a_worker_serving_every_queue_gets_its_model_and_tool_calls_eagerly(time_worker: Client) -> None:
    handle = await start(time_worker, auto_accept_plan=True)
    await handle.result()
    queues = scheduled_queues(await handle.fetch_history())
    # On the run's own queue, so the server hands them straight back to the worker that asked.
    assert queues["chat"] == queues["web_search"] == TASK_QUEUE
    assert queues["python_repl_tool"] == queue_name("sandbox"), "model-written code only on the sandbox's queue"
    assert queues["load_run_config"] == TASK_QUEUE


async def test_without_eager_activities_a_new_run_schedules_each_kind_on_its_queue(
    worker_with: WorkerWith, provider_env: dict[str, str]
) -> None:
    async with worker_with(settings_with(provider_env, DEERFLOW_EAGER_ACTIVITIES="false")) as client:
        handle = await start(client, auto_accept_plan=True)
        await handle.result()
    queues = scheduled_queues(await handle.fetch_history())
    main = (await handle.describe()).task_queue  # the test worker's own
    assert queues["chat"] == queue_name("model", main)
    assert queues["web_search"] == queue_name("tools", main)
    assert queues["python_repl_tool"] == queue_name("sandbox", main)
