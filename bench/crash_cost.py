"""Crash cost: how many model calls a run killed once mid-step makes, against the same run unkilled.

Run from the repository root: ``.venv/bin/python bench/crash_cost.py`` (about 1-2 minutes).

Why it is measured this way: model calls are what a crash costs in money, so they are counted
where they arrive, at the model server. This process serves the offline fake model and fake
Tavily itself and starts ``worker.py`` (a real process, on a real dev server) pointed at them;
every request the worker sends, including the one lost when it is killed, is in
``FakeModelServer.requests``. The fake model is deterministic, so the three runs differ only by
the kill. A kill lands exactly inside a call because that call is held open (an injected delay
aimed at one agent, or the next search) until the worker dies.

Rows: no kill; ``kill -9`` of the worker during a researcher's model call (mid-step); ``kill -9``
during a researcher's web search. The target is at most one extra model call per crash. Resume
is the time from launching the replacement worker to the first task it completes (it includes
the worker's start-up, and the heartbeat timeout after which the lost call is retried).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a plain script

from temporalio.client import Client, WorkflowHandle

from config.settings import load_settings
from offline.model_server import FakeModelServer, Fault
from offline.scripted_agents import detect_agent
from offline.search_server import FakeSearchServer
from offline.search_server import Fault as SearchFault
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.shutdown import exit_now
from tests.history_checks import (
    activity_types,
    assert_not_rerun,
    completed_activity_ids,
    event_time,
    first_progress,
    retried_activities,
    wait_for_poller,
    worker_identity,
)
from tests.processes import DevServer, WorkerProcess
from workflows.models import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult

QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"
HELD_OPEN_SECONDS = 30.0


@dataclass
class Row:
    name: str
    model_calls: int
    searches: int
    wall_seconds: float
    resume_seconds: float | None = None
    after_kill_seconds: float | None = None
    retried: str = ""


class Bench:
    """The fakes, one dev server and the current worker process."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.model = FakeModelServer().start()
        self.search = FakeSearchServer().start()
        self.server = DevServer(workdir / "temporal.db").start()
        self.env = {
            "OPENAI_API_KEY": "offline", "OPENAI_BASE_URL": self.model.base_url,
            "BASIC_MODEL": "deerflow-offline-demo", "TAVILY_API_KEY": "offline",
            "TAVILY_BASE_URL": self.search.base_url, "DEERFLOW_OFFLINE_DEMO": "1",
        }
        self.worker: WorkerProcess | None = None
        self.launched_at = datetime.now(UTC)
        self._workers = 0
        self.client: Client

    async def connect(self) -> None:
        self.client = await connect_when_ready(self.server.address, data_converter=data_converter(load_settings()))

    def launch_worker(self) -> str:
        """Start a worker process; returns its identity (the clock for "resume" starts here)."""
        self._workers += 1
        self.launched_at = datetime.now(UTC)
        self.worker = WorkerProcess(self.server.address, self.workdir / f"worker-{self._workers}.log",
                                    env=self.env).start()
        assert self.worker.process is not None
        return worker_identity(self.worker.process.pid)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        self.server.stop()
        self.model.stop()
        self.search.stop()

    def agent_calls(self, agent: str) -> int:
        return sum(1 for body in list(self.model.requests) if detect_agent(body.get("messages") or []) == agent)

    async def start_run(self, prefix: str) -> WorkflowHandle:
        self.model.requests.clear()
        self.search.requests.clear()
        return await self.client.start_workflow(
            WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True),
            id=f"{prefix}-{int(time.time() * 1000)}", task_queue=TASK_QUEUE, result_type=ResearchResult)


async def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def unkilled(bench: Bench) -> Row:
    started = time.monotonic()
    handle = await bench.start_run("bench-nokill")
    result = await handle.result()
    check_complete(result)
    return Row("no kill", len(bench.model.requests), len(bench.search.requests), time.monotonic() - started)


async def killed(bench: Bench, name: str, hold: Callable[[], None], in_flight: Callable[[], bool]) -> Row:
    """Start a run, SIGKILL the worker once ``in_flight()`` holds, let a new worker finish the run.

    ``hold()`` arms the delay once the planner has been asked: by then the background search is
    over, so the next search (or researcher turn) is the first one of step 1.
    """
    started = time.monotonic()
    handle = await bench.start_run("bench-kill")
    await wait_until(lambda: bench.agent_calls("planner") == 1, "the planner's call")
    hold()
    await wait_until(in_flight, "the held call")
    assert bench.worker is not None
    bench.worker.kill()
    killed_at = datetime.now(UTC)
    completed_before = completed_activity_ids(await handle.fetch_history())
    identity = bench.launch_worker()
    result = await asyncio.wait_for(handle.result(), timeout=180)
    wall = time.monotonic() - started
    check_complete(result)
    history = await handle.fetch_history()
    assert_not_rerun(completed_before, history)
    progress = first_progress(history, since=bench.launched_at, identity=identity)
    assert progress is not None, "the new worker completed nothing"
    retried = ", ".join(f"{kind} (attempt {attempt})" for kind, attempt in retried_activities(history).values())
    searches = sum(1 for kind in activity_types(history).values() if kind == "web_search")
    assert len(bench.search.requests) >= searches
    return Row(name, len(bench.model.requests), len(bench.search.requests), wall,
               (event_time(progress) - bench.launched_at).total_seconds(),
               (event_time(progress) - killed_at).total_seconds(), retried)


def check_complete(result: ResearchResult) -> None:
    if result.plan is None or not all(step.execution_res for step in result.plan.steps):
        raise SystemExit(f"the run did not complete every step: {result!r}")


def table(rows: list[Row]) -> str:
    base = rows[0].model_calls
    lines = [
        "| Run | Model calls | Extra | Ratio | Searches | Wall time | Resume (from new worker) | After kill "
        "| Retried |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        resume = f"{row.resume_seconds:.1f} s" if row.resume_seconds is not None else "-"
        after = f"{row.after_kill_seconds:.1f} s" if row.after_kill_seconds is not None else "-"
        lines.append(f"| {row.name} | {row.model_calls} | {row.model_calls - base:+d} | {row.model_calls / base:.2f} "
                     f"| {row.searches} | {row.wall_seconds:.1f} s | {resume} | {after} | {row.retried or '-'} |")
    return "\n".join(lines)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="crash-cost-") as tmp:
        bench = Bench(Path(tmp))
        try:
            await bench.connect()
            identity = bench.launch_worker()
            await wait_for_poller(bench.client, identity)
            print(f"worker ready {(datetime.now(UTC) - bench.launched_at).total_seconds():.1f} s after launch")
            rows = [await unkilled(bench)]
            rows.append(await killed(
                bench, "kill -9 in a model call",
                hold=lambda: bench.model.inject(Fault.timeout(HELD_OPEN_SECONDS, agent="researcher")),
                in_flight=lambda: bench.agent_calls("researcher") == 1))
            rows.append(await killed(
                bench, "kill -9 in a tool call",
                hold=lambda: bench.search.inject(SearchFault.timeout(HELD_OPEN_SECONDS)),
                in_flight=lambda: len(bench.search.requests) == 2))
        finally:
            bench.close()
    print(table(rows))
    worst = max(row.model_calls - rows[0].model_calls for row in rows)
    print(f"\nCrash cost: at most {worst:+d} model call(s) per crash "
          f"(ratio {max(row.model_calls for row in rows) / rows[0].model_calls:.2f}); target: at most +1.")
    if worst > 1:
        raise SystemExit(1)


if __name__ == "__main__":
    asyncio.run(main())
    exit_now(0)
