"""Crash cost: how many model calls a run killed once mid-step makes, against the same run unkilled.

Run from the repository root: ``.venv/bin/python bench/crash_cost.py`` (about 1-2 minutes).

Why it is measured this way: model calls are what a crash costs in money, so they are counted
where they arrive, at the model server. This process serves the offline fake model and fake
Tavily itself and starts ``worker.py`` (a real process, on a real dev server) pointed at them;
every request the worker sends, including the one lost when it is killed, is in
``FakeModelServer.requests``. The fake model is deterministic, so the three runs differ only by
the kill. A kill lands exactly inside a call because that call is held open (an injected delay
aimed at one agent, or the next search) until the worker dies.

``--false-alarms 3``: instead, three unkilled runs whose model calls take 4 s each (longer than
the 3 s heartbeat timeout) beside three busy loops, counting attempts declared lost and the
longest gap between the beats the server recorded.

Rows: no kill; ``kill -9`` of the worker during a researcher's model call (mid-step); ``kill -9``
during a researcher's web search. The target is at most one extra model call per crash. Resume
is the time from launching the replacement worker to the first task it completes (it includes
the worker's start-up, its reclaim of the lost call from the dead worker's in-flight journal, or
with ``DEERFLOW_RECLAIM_LOST_ATTEMPTS=false`` the heartbeat timeout, and the retried call).
"Retried" names what ended the lost attempt: ``WorkerLost`` (the reclaim) or ``timeout:...``.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a plain script

from temporalio.client import WorkflowHandle

from config.settings import load_settings
from offline.model_server import FakeModelServer, Fault
from offline.search_server import FakeSearchServer
from offline.search_server import Fault as SearchFault
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.shutdown import exit_now
from tests.support.crash_drill import Recovery, WorkerSlot, kill_and_recover, wait_until
from tests.support.history_checks import (
    activity_types,
    assert_not_rerun,
    retried_activities,
    retry_causes,
)
from tests.support.processes import DevServer
from tests.support.runs import QUESTION
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult

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
    breakdown: str = ""


class Bench:
    """The fakes, one dev server and the worker slot (its current process, replaced after a kill)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.model = FakeModelServer().start()
        self.search = FakeSearchServer().start()
        self.server = DevServer(workdir / "temporal.db").start()
        self.workers: WorkerSlot | None = None

    async def connect(self) -> WorkerSlot:
        client = await connect_when_ready(self.server.address, data_converter=data_converter(load_settings()))
        self.workers = WorkerSlot(self.server.address, client, self.model, self.search, self.workdir)
        return self.workers

    def close(self) -> None:
        if self.workers is not None:
            self.workers.stop()
        self.server.stop()
        self.model.stop()
        self.search.stop()

    async def start_run(self, prefix: str) -> WorkflowHandle:
        assert self.workers is not None, "connect() first"
        self.model.requests.clear()
        self.search.requests.clear()
        return await self.workers.client.start_workflow(
            WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True),
            id=f"{prefix}-{int(time.time() * 1000)}", task_queue=TASK_QUEUE, result_type=ResearchResult)


async def unkilled(bench: Bench) -> Row:
    started = time.monotonic()
    handle = await bench.start_run("bench-nokill")
    result = await handle.result()
    check_complete(result)
    return Row("no kill", len(bench.model.requests), len(bench.search.requests), time.monotonic() - started)


async def killed(bench: Bench, workers: WorkerSlot, name: str, hold: Callable[[], None],
                 in_flight: Callable[[], bool]) -> Row:
    """Start a run, SIGKILL the worker once ``in_flight()`` holds, let a new worker finish the run.

    ``hold()`` arms the delay once the planner has been asked: by then the background search is
    over, so the next search (or researcher turn) is the first one of step 1.
    """
    started = time.monotonic()
    handle = await bench.start_run("bench-kill")
    await wait_until(lambda: len(bench.model.requests_for("planner")) == 1, "the planner's call")
    hold()
    await wait_until(in_flight, "the held call")
    recovery = await kill_and_recover(handle, workers)
    wall = time.monotonic() - started
    check_complete(recovery.result)
    assert_not_rerun(recovery.completed_before, recovery.history)
    causes = retry_causes(recovery.history)
    retried = ", ".join(f"{kind} (attempt {attempt}, after {causes.get(activity_id, '?')})"
                        for activity_id, (kind, attempt) in retried_activities(recovery.history).items())
    # The drill clears the search fake's log with its faults once the worker is dead.
    searches = recovery.searches_before + len(bench.search.requests)
    assert searches >= sum(1 for kind in activity_types(recovery.history).values() if kind == "web_search")
    return Row(name, len(bench.model.requests), searches, wall, recovery.resume_seconds, recovery.killed_seconds,
               retried, breakdown(recovery))


def _since(start: datetime | None, end: datetime | None) -> str:
    return f"{(end - start).total_seconds():.2f}" if start and end else "?"


def breakdown(recovery: Recovery) -> str:
    """Where the seconds from the kill to the retried call's completion went, for the second table."""
    lost = recovery.lost
    if lost is None:
        return "| - | - | - | - | - | - |"
    return (f"| {_since(lost.last_heartbeat, recovery.killed_at)} | {_since(recovery.killed_at, lost.timed_out)} "
            f"| {_since(lost.timed_out, lost.retry_due)} | {recovery.startup_seconds:.2f} "
            f"| {_since(max(lost.retry_due, recovery.poll_at) if lost.retry_due else None, lost.retry_started)} "
            f"| {_since(lost.retry_started, lost.retry_completed)} |")


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
    lines += [
        "",
        "Where the seconds went (s): last heartbeat -> kill | kill -> attempt given up (by the new worker's reclaim, "
        "else its heartbeat timeout) "
        "| given up -> retry due (back-off) | new worker launch -> it polls | retry due (or poll) -> retry started "
        "| retried call",
        "",
        "| Run | Beat->kill | Kill->given up | Back-off | Start-up | ->started | Call |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(f"| {row.name} {row.breakdown}" for row in rows if row.breakdown),
    ]
    return "\n".join(lines)


async def beat_gaps(handle: WorkflowHandle, gaps: list[float]) -> None:
    """Sample the run's pending activities until cancelled; append each gap between two beats the
    server recorded for one attempt (from its start for the first), so the worst shows the margin."""
    last: dict[tuple[str, int], datetime] = {}
    while True:
        for info in (await handle.describe()).raw_description.pending_activities:
            key = (info.activity_id, info.attempt)
            beat = info.last_heartbeat_time.ToDatetime(tzinfo=UTC) if info.last_heartbeat_time.seconds else None
            start = info.last_started_time.ToDatetime(tzinfo=UTC) if info.last_started_time.seconds else None
            previous = last.get(key, start)
            if beat is not None and previous is not None and beat > previous:
                gaps.append((beat - previous).total_seconds())
                last[key] = beat
        await asyncio.sleep(0.1)


async def false_alarms(bench: Bench, runs: int, busy: int, latency: float) -> None:
    """No-kill runs whose every model call outlasts the heartbeat timeout, beside ``busy`` CPU-bound
    processes: any attempt above 1 in their histories would be a live call declared lost."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    bench.model.latency_seconds = latency
    try:
        for number in range(1, runs + 1):
            gaps: list[float] = []
            handle = await bench.start_run("bench-load")
            sampler = asyncio.create_task(beat_gaps(handle, gaps))
            try:
                check_complete(await handle.result())
            finally:
                sampler.cancel()
            history = await handle.fetch_history()
            retried = retried_activities(history)
            causes = sorted({attributes.last_failure.message for attributes in
                             (event.activity_task_started_event_attributes for event in history.events)
                             if attributes.attempt > 1})
            print(f"run {number}: {len(bench.model.requests)} model calls of {latency:.0f} s, {busy} busy loops: "
                  f"{len(retried)} attempt(s) retried {sorted(retried.values()) or ''} {causes or ''}; "
                  f"longest gap between beats the server saw {max(gaps, default=0):.2f} s over {len(gaps)} beats")
    finally:
        bench.model.latency_seconds = 0.0
        for loop in loops:
            loop.kill()
            loop.wait()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--false-alarms", type=int, default=0, metavar="RUNS",
                        help="instead: RUNS unkilled runs with slow model calls beside busy loops")
    parser.add_argument("--busy", type=int, default=3, help="CPU-bound processes beside --false-alarms runs")
    parser.add_argument("--latency", type=float, default=4.0, help="seconds per model call in --false-alarms runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crash-cost-") as tmp:
        bench = Bench(Path(tmp))
        try:
            workers = await bench.connect()
            await workers.live()
            print(f"worker ready {(datetime.now(UTC) - workers.started_at).total_seconds():.1f} s after launch")
            if args.false_alarms:
                await false_alarms(bench, args.false_alarms, args.busy, args.latency)
                return
            rows = [await unkilled(bench)]
            rows.append(await killed(
                bench, workers, "kill -9 in a model call",
                hold=lambda: bench.model.inject(Fault.timeout(HELD_OPEN_SECONDS, agent="researcher")),
                in_flight=lambda: len(bench.model.requests_for("researcher")) == 1))
            rows.append(await killed(
                bench, workers, "kill -9 in a tool call",
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
