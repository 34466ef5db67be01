"""The live view of a run (cli/watch.py): its rendering, its poll loop, and a real run end to end.

Why: a watch is left open for the length of a run, so it must show each change once, survive
the server going away and coming back, notice that the run ended however it ended, and be
quick enough to feel live. The display delay it measures is the number we quote for that.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from cli.watch import Watcher, WatchStats, clock_time, format_duration, render_status, watch
from config.settings import load_settings
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.embedded import has_worker, search_attribute_flags
from runtime.front_door import CliError
from tests.support.processes import DevServer, WorkerProcess
from tests.support.runs import run_id
from tests.support.status_samples import T0, ScriptedRun, at, handle, sample_status
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.status import Awaiting, Phase, ProgressEvent, RunStatus


def text_of(renderable: Any, width: int = 110) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


# ---------------------------------------------------------------- rendering


def test_panel_shows_run_phase_clocks_plan_findings_and_usage() -> None:
    text = text_of(render_status(sample_status(), "research-abc", T0 + timedelta(seconds=100)))
    for expected in ("research-abc", "researching", "1m40s", "Plan v1 · Solid-state batteries",
                     "Background and key facts", "1m05s", "25s", "processing", "analysis",
                     "Solid electrolytes replace the liquid one.", "7 model calls", "15,456 tokens",
                     f"{clock_time(at(75))} step 1 done: Background and key facts"):
        assert expected in text, f"{expected!r} missing from:\n{text}"
    assert "##" not in text and "**" not in text, "findings are previewed without markdown syntax"
    assert "Awaiting" not in text


def test_panel_highlights_a_pending_review_with_the_commands() -> None:
    status = sample_status(phase=Phase.AWAITING_REVIEW, awaiting=Awaiting.PLAN_FEEDBACK, review_deadline=at(7 * 86400))
    text = text_of(render_status(status, "research-abc", T0), width=120)
    assert "Awaiting plan review" in text
    assert "python starter.py review research-abc --accept" in text
    assert 'python starter.py review research-abc --edit "what to change"' in text
    assert "plan_feedback" in text and "[ACCEPTED]" in text


def test_panel_under_review_shows_the_whole_plan_once_accepted_only_its_progress() -> None:
    """On a terminal the panel is the one copy of the plan on screen (``run`` prints no second one),
    so at review it carries what the plain plan has: thought, locale and each step's description."""
    status = sample_status(phase=Phase.AWAITING_REVIEW, awaiting=Awaiting.PLAN_FEEDBACK, review_deadline=at(86400))
    assert status.plan is not None
    plan = status.plan.model_copy(update={"thought": "Three steps, costs last.", "locale": "en-GB", "steps": [
        step.model_copy(update={"description": f"Describe {step.title.lower()}."}) for step in status.plan.steps]})
    reviewing = text_of(render_status(status.model_copy(update={"plan": plan}), "research-abc", T0), width=120)
    for expected in ("(locale en-GB)", "Thought: Three steps, costs last.", "Describe background and key facts.",
                     "Describe cost data.", "Describe outlook."):
        assert expected in reviewing, f"{expected!r} missing from:\n{reviewing}"
    accepted = status.model_copy(update={"plan": plan, "awaiting": None, "phase": Phase.RESEARCHING})
    running = text_of(render_status(accepted, "research-abc", T0), width=120)
    assert "Background and key facts" in running and "Describe" not in running and "Thought" not in running


def test_panel_shows_a_clarifying_question_and_how_to_answer() -> None:
    status = sample_status(phase=Phase.AWAITING_CLARIFICATION, awaiting=Awaiting.CLARIFICATION,
                           question="Which market do you mean?", plan=None, steps=[])
    text = text_of(render_status(status, "r1", T0), width=140)
    assert "Which market do you mean?" in text
    assert "--name clarification_answer" in text


def test_finished_run_clock_stops_at_its_last_event_and_notes_go_in_the_subtitle() -> None:
    status = sample_status(phase=Phase.COMPLETED, events=[ProgressEvent(at=at(130), kind="phase", message="completed")])
    text = text_of(render_status(status, "r1", T0 + timedelta(hours=5), note="reconnecting… (down)"))
    assert "2m10s" in text
    assert "reconnecting… (down)" in text


def test_durations_read_naturally() -> None:
    assert [format_duration(s) for s in (0, 59.9, 60, 3599, 3600, 7322)] == ["0s", "59s", "1m00s", "59m59s",
                                                                              "1h00m", "2h02m"]


# ---------------------------------------------------------------- the poll loop, scripted


def unavailable() -> RPCError:
    return RPCError("tcp connect error", RPCStatusCode.UNAVAILABLE, b"")


def now_iso(offset: float = 0.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=offset)).isoformat()


async def test_plain_watch_prints_each_change_once_and_survives_an_outage() -> None:
    backlog = ProgressEvent(at=at(0), kind="phase", message="coordinating")  # long before the watch began
    events: list[ProgressEvent] = [backlog]

    def growing(*new: tuple[str, str, int | None], **changes: Any) -> Callable[[], RunStatus]:
        def status() -> RunStatus:
            for kind, message, index in new:
                if not any(e.kind == kind and e.message == message for e in events):
                    events.append(ProgressEvent(at=now_iso(), kind=kind,  # type: ignore[arg-type]
                                                message=message, step_index=index))
            return sample_status(events=list(events), **changes)
        return status

    running = WorkflowExecutionStatus.RUNNING
    run = ScriptedRun([
        (running, growing()),
        (running, growing(("phase", "awaiting_review (awaiting plan_feedback)", None),
                          phase=Phase.AWAITING_REVIEW, awaiting=Awaiting.PLAN_FEEDBACK)),
        (running, growing(phase=Phase.AWAITING_REVIEW, awaiting=Awaiting.PLAN_FEEDBACK)),  # nothing new
        (unavailable(), unavailable()),
        (unavailable(), unavailable()),
        (running, growing(("phase", "researching", None), ("step_started", "Cost data", 1))),
        (running, growing(("step_done", "Cost data", 1))),
        (WorkflowExecutionStatus.COMPLETED, growing(("phase", "completed", None), phase=Phase.COMPLETED)),
    ])
    out = io.StringIO()
    stats = WatchStats()
    watcher = Watcher(live=False, out=out, stats=stats, poll_seconds=0.01, describe=run.describe, query=run.query)
    final = await watcher.follow(handle())
    lines = out.getvalue().splitlines()

    assert final.phase is Phase.COMPLETED
    assert watcher.closed is WorkflowExecutionStatus.COMPLETED
    body = [line.split("] ", 1)[1] if line.startswith("[") else line for line in lines]
    assert body == [
        "phase → coordinating",
        "phase → awaiting_review (awaiting plan_feedback)",
        "  Awaiting plan review",  # shown once, with every way to answer (workflows/research/status_view.py)
        "    python starter.py review research-scripted --accept",
        '    python starter.py review research-scripted --edit "what to change"',
        "    temporal workflow signal --workflow-id research-scripted --name plan_feedback --input '\"[ACCEPTED]\"'",
        '    Web UI: Send a Signal, name plan_feedback, input "[ACCEPTED]" or "[EDIT_PLAN] <what to change>"',
        "reconnecting… (tcp connect error)",
        "reconnected",
        "phase → researching",
        "step 2 started: Cost data",
        "step 2 done: Cost data",
        "phase → completed",
        "run completed: completed, 7 model calls, 15,456 tokens",
    ], out.getvalue()
    assert lines[0].startswith(f"[{clock_time(backlog.at)}]")
    # The backlog event is shown but not measured: it says nothing about how live the view is.
    assert stats.count == 5
    assert stats.median is not None and stats.max is not None
    assert 0.0 <= stats.median <= stats.max < 5.0
    assert "over 5 events" in stats.summary()


async def test_a_run_no_worker_answers_for_says_so_instead_of_reconnecting() -> None:
    timeout = RPCError("Timeout expired", RPCStatusCode.CANCELLED, b"")
    running = WorkflowExecutionStatus.RUNNING
    run = ScriptedRun([(running, timeout), (running, timeout), (running, timeout),
                       (WorkflowExecutionStatus.COMPLETED, lambda: sample_status(phase=Phase.COMPLETED, events=[]))])
    out = io.StringIO()
    await Watcher(live=False, out=out, poll_seconds=0.01, describe=run.describe, query=run.query).follow(handle())
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines[:2] == ["waiting for a worker… (status query: Timeout expired): no worker answers this run's "
                         "queries. Start one with `python worker.py` (same TEMPORAL_* settings)", "reconnected"], lines


async def test_unknown_run_is_a_clear_error() -> None:
    run = ScriptedRun([(RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""), unavailable())])
    with pytest.raises(CliError, match="No research run with ID 'research-scripted'"):
        await Watcher(live=False, out=io.StringIO(), describe=run.describe, query=run.query).follow(handle())


async def test_terminated_run_without_a_worker_ends_the_watch_as_failed() -> None:
    run = ScriptedRun([
        (WorkflowExecutionStatus.RUNNING,
         lambda: sample_status(phase=Phase.AWAITING_REVIEW, awaiting=Awaiting.PLAN_FEEDBACK)),
        (WorkflowExecutionStatus.TERMINATED, unavailable()),  # no worker left to answer the query
    ])
    out = io.StringIO()
    final = await Watcher(live=False, out=out, poll_seconds=0.01, describe=run.describe,
                          query=run.query).follow(handle())
    assert final.phase is Phase.FAILED
    assert final.error == "the run was terminated"
    assert "run terminated: last phase awaiting_review" in out.getvalue()  # how it ended, then where it stood


async def test_follow_until_returns_while_the_run_goes_on() -> None:
    run = ScriptedRun([
        (WorkflowExecutionStatus.RUNNING, lambda: sample_status(phase=Phase.PLANNING)),
        (WorkflowExecutionStatus.RUNNING,
         lambda: sample_status(phase=Phase.AWAITING_REVIEW, awaiting=Awaiting.PLAN_FEEDBACK)),
        (WorkflowExecutionStatus.RUNNING, lambda: sample_status()),
    ])
    watcher = Watcher(live=False, out=io.StringIO(), poll_seconds=0.01, describe=run.describe, query=run.query)
    paused = await watcher.follow(handle(), until=lambda s: s.awaiting == "plan_feedback")
    assert paused.phase is Phase.AWAITING_REVIEW
    assert watcher.closed is None


async def test_live_watch_draws_the_panel_and_flags_reconnecting() -> None:
    run = ScriptedRun([
        (WorkflowExecutionStatus.RUNNING, lambda: sample_status()),
        (unavailable(), unavailable()),
        (WorkflowExecutionStatus.COMPLETED, lambda: sample_status(phase=Phase.COMPLETED)),
    ])
    out = io.StringIO()
    final = await Watcher(live=True, out=out, poll_seconds=0.01, describe=run.describe,
                          query=run.query).follow(handle())
    assert final.phase is Phase.COMPLETED
    drawn = out.getvalue()
    assert "DeerFlow research · research-scripted" in drawn
    assert "reconnecting… (tcp connect error)" in drawn
    assert "completed" in drawn


# ---------------------------------------------------------------- a real run, and a server restart


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    dev = DevServer(tmp_path_factory.mktemp("watch") / "temporal.db", extra_args=search_attribute_flags()).start()
    yield dev
    dev.stop()


@pytest.fixture(scope="module")
async def client(server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    client = await connect_when_ready(server.address, data_converter=data_converter(load_settings()))
    tmp_path = tmp_path_factory.mktemp("watch-worker")
    worker = WorkerProcess(server.address, tmp_path / "worker.log",
                           env={"DEERFLOW_OFFLINE_MODEL_LATENCY": "0.2"}).start()
    deadline = time.monotonic() + 60
    while not await has_worker(client):
        assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
        await asyncio.sleep(0.2)
    yield client
    worker.stop()


async def test_watch_follows_a_real_run_through_review_and_a_server_restart(
    server: DevServer, client: Client
) -> None:
    request = ResearchRequest(question="What are the prospects of solid-state batteries?", max_step_num=2)
    run = await client.start_workflow(WORKFLOW_TYPE, request, id=run_id("watch"), task_queue=TASK_QUEUE,
                                      result_type=ResearchResult)
    out = io.StringIO()
    stats = WatchStats()
    watcher = Watcher(live=False, out=out, stats=stats)
    paused = await asyncio.wait_for(watcher.follow(run, until=lambda s: s.awaiting == "plan_feedback"), 60)
    assert paused.phase is Phase.AWAITING_REVIEW

    # The server goes away while the run waits for review, and comes back (same database).
    server.stop()
    following = asyncio.create_task(watcher.follow(run))
    deadline = time.monotonic() + 20
    while "reconnecting…" not in out.getvalue():
        assert time.monotonic() < deadline, out.getvalue()
        await asyncio.sleep(0.1)
    server.start()
    while "reconnected" not in out.getvalue():
        assert time.monotonic() < deadline + 30, out.getvalue()
        await asyncio.sleep(0.1)
    await run.signal("plan_feedback", "[ACCEPTED]")
    final = await asyncio.wait_for(following, 90)

    assert final.phase is Phase.COMPLETED
    assert (await run.result()).report
    shown = out.getvalue()
    for expected in ("phase → awaiting_review (awaiting plan_feedback)", "review: [ACCEPTED]", "phase → researching",
                     "step 1 done:", "step 2 done:", "phase → reporting", "run completed: completed"):
        assert expected in shown, shown
    assert shown.count("step 1 done:") == 1, "each event is shown once"
    assert stats.count >= 6
    assert stats.median is not None and stats.max is not None
    print(f"\n{stats.summary()}")
    assert stats.median < 1.5, stats.summary()


async def test_watch_function_returns_the_final_status(client: Client) -> None:
    request = ResearchRequest(question="How do heat pumps work?", auto_accept_plan=True, max_step_num=1)
    run = await client.start_workflow(WORKFLOW_TYPE, request, id=run_id("watchfn"), task_queue=TASK_QUEUE,
                                      result_type=ResearchResult)
    stats = WatchStats()
    final = await asyncio.wait_for(watch(run, live=False, out=io.StringIO(), stats=stats), 90)
    assert final.phase is Phase.COMPLETED
    assert final.usage.llm_calls > 0
    assert stats.count > 0
