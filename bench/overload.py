"""Overload (issue #19): N concurrent runs through the API server, the worker SIGKILLed mid-load, beside busy loops.

Run from the repository root: ``.venv/bin/python bench/overload.py`` (both settings, 40 runs each;
about 10 minutes, most of it the starvation's 4 minutes and what follows). ``--settings starved``
runs one setting; ``--load-seconds 60`` shortens the busy loops (the issue's figure is 240 s).

Why it is measured this way: a durable run must outlive a slow, starved or crashed worker, and the
way to show it is to do all three at once and read every run's history afterwards. The stack is
the embedded default's: a dev server, one ``worker.py`` process and the API server
(``starter.py serve``, sharing the worker's ``DEERFLOW_HOME`` as the embedded default does, so the
worker sends it token previews too). The runs are started as the page starts them,
``POST /api/runs`` with ``auto_accept_plan``. The fake model and fake search run here, in the
bench (0.05 s per model call): a real provider is another machine, which a starved worker host
does not slow down.

The two settings (loops: two CPU-bound processes per core, for the first ``--load-seconds``, then
they stop; both bounded in time by themselves and killed on the way out):

- ``equal``: the loops at the worker's priority;
- ``starved``: the worker (and its replacement) at ``nice -n 19`` beside the loops at the bench's
  own niceness: a low-priority batch host. Under it a worker's event loop may go seconds without
  running, longer than the 4 s heartbeat timeout of model calls and searches.

Once the model has answered ``--kill-calls`` calls (default: four per run, about half of a run's
nine) or ``--kill-after`` seconds have passed, whichever is first, the worker's process group is
SIGKILLed and a new worker is started at once (what a supervisor does), at the same niceness.

What is reported per setting, from each run's history once every run has ended (or at the
``--timeout``): runs completed with their report, failed, ended without a report, still running;
whether each completed exactly once (one completion per activity, per model turn, and exactly one
reporter turn); wall time (first run started to last run closed); retries by cause (see
``tests/history_checks.retries_by_cause``: history records only the failure before each activity's
last attempt); activities given up by cause; the machine's load average at the kill; and the peak
RSS of the worker and of its replacement (alone and with its children: the extraction fork server,
the sandbox). Exit status 1 unless every run of every setting completed with its report, exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
from harness import Memory, RssSampler, Stack, bench_stack, header, run_main
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from runtime.shutdown import exit_now
from tests.support.history_checks import SCHEDULED, completed_once_problems, given_up, retries_by_cause
from tests.support.processes import BusyLoops, ServeProcess, free_port
from tests.support.runs import QUESTION
from workflows.calls.errors import failure_message
from workflows.contracts.research import Outcome, ResearchResult

LOOPS_PER_CORE = 2


@dataclass(frozen=True)
class Setting:
    name: str
    worker_niceness: int  # added to the bench's own niceness for the worker
    loop_niceness: int  # added to the bench's own niceness for the busy loops


SETTINGS = {"equal": Setting("equal", 0, 0), "starved": Setting("starved", 19, 0)}


@dataclass
class Outcomes:
    """What one setting's runs came to."""

    setting: str
    runs: int
    loops: int
    loop_seconds: float  # how long the loops ran (until their deadline, or the end of the runs)
    kill_at: float  # seconds from the first start
    calls_at_kill: int
    replacement_polls_after: float  # seconds from the kill to the new worker's first poll
    load_at_kill: float  # the machine's 1-minute load average then (our loops, worker and servers included)
    wall_seconds: float = 0.0
    reports: int = 0
    failed: int = 0
    no_report: int = 0
    running: int = 0
    not_once: list[str] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)  # failed runs' messages
    retries: Counter[str] = field(default_factory=Counter)
    given_up: Counter[str] = field(default_factory=Counter)
    activities: Counter[int] = field(default_factory=Counter)  # activities scheduled per run -> runs
    peak: tuple[Memory, Memory] | None = None  # the worker's, its replacement's

    @property
    def met(self) -> bool:
        return self.reports == self.runs and not self.not_once


async def start_runs(url: str, runs: int) -> list[str]:
    """``runs`` auto-accepted runs started through the API server at once, as the page starts them."""
    async with httpx.AsyncClient(timeout=120) as http:
        async def start() -> str:
            response = await http.post(f"{url}/api/runs", json={"question": QUESTION, "auto_accept_plan": True})
            response.raise_for_status()
            return str(response.json()["id"])
        return list(await asyncio.gather(*(start() for _ in range(runs))))


async def until_mid_load(stack: Stack, calls: int, seconds: float) -> None:
    """Until the model has answered ``calls`` calls, or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while len(stack.model.requests) < calls and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def until_ended(stack: Stack, deadline: float) -> None:
    """Until no run is running (the dev server holds only this bench's runs), or ``deadline``."""
    while (await stack.client.count_workflows("ExecutionStatus = 'Running'")).count:
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(2)


async def read_runs(stack: Stack, ids: list[str], outcomes: Outcomes) -> None:
    """Each run's ending and history, into ``outcomes``."""
    starts, closes = [], []
    for run in ids:
        handle = stack.client.get_workflow_handle(run, result_type=ResearchResult)
        description = await handle.describe()
        starts.append(description.start_time)
        if description.status == WorkflowExecutionStatus.RUNNING:
            outcomes.running += 1
            continue
        if description.close_time is not None:
            closes.append(description.close_time)
        history = await handle.fetch_history()
        outcomes.retries += retries_by_cause(history)
        outcomes.given_up += given_up(history)
        outcomes.activities[sum(1 for event in history.events if event.event_type == SCHEDULED)] += 1
        try:
            result = await handle.result()
        except WorkflowFailureError as error:
            outcomes.failed += 1
            outcomes.failures[failure_message(error.cause)] += 1
            continue
        if result.outcome is not Outcome.REPORT or not result.report.strip():
            outcomes.no_report += 1
            continue
        outcomes.reports += 1
        outcomes.not_once += [f"{run}: {problem}" for problem in
                              await completed_once_problems(history, stack.client.data_converter)]
    if closes:
        outcomes.wall_seconds = (max(closes) - min(starts)).total_seconds()


async def run_setting(setting: Setting, args: argparse.Namespace) -> Outcomes:
    loops = BusyLoops(LOOPS_PER_CORE * (os.cpu_count() or 1), args.load_seconds, setting.loop_niceness)
    async with bench_stack(model_latency=args.latency, worker_niceness=setting.worker_niceness) as stack:
        serve = ServeProcess(stack.server.address, free_port(), stack.workdir / "serve.log", stack.workdir / "home")
        try:
            with contextlib.ExitStack() as samplers, loops:
                first = samplers.enter_context(RssSampler(stack.worker.pid))
                began = time.monotonic()
                ids = await start_runs(serve.url, args.runs)
                await until_mid_load(stack, args.kill_calls or 4 * args.runs, args.kill_after)
                calls, killed, load = len(stack.model.requests), time.monotonic(), os.getloadavg()[0]
                stack.worker.kill()
                stack.worker.start()
                replacement = samplers.enter_context(RssSampler(stack.worker.pid))
                await stack.until_worker_polls(timeout=args.timeout)
                outcomes = Outcomes(setting.name, args.runs, loops.count, loop_seconds=0.0, kill_at=killed - began,
                                    calls_at_kill=calls, replacement_polls_after=time.monotonic() - killed,
                                    load_at_kill=load)
                print(f"[{setting.name}] {args.runs} runs started; worker killed {outcomes.kill_at:.1f} s in, after "
                      f"{calls} model calls (load average {load:.1f}); its replacement polled "
                      f"{outcomes.replacement_polls_after:.1f} s later", flush=True)
                await until_ended(stack, began + args.timeout)
            outcomes.loop_seconds = loops.ended_at - loops.started_at
            outcomes.peak = (first.peak(), replacement.peak())
            await read_runs(stack, ids, outcomes)
        finally:
            serve.kill()
    return outcomes


def rss(outcome: Outcomes) -> str:
    if outcome.peak is None:
        return "-"
    worker, replacement = outcome.peak
    return (f"worker {worker.main_rss:.0f} / {worker.tree_rss:.0f} MiB, "
            f"replacement {replacement.main_rss:.0f} / {replacement.tree_rss:.0f} MiB")


def counts(counter: Counter[str] | Counter[int]) -> str:
    return ", ".join(f"{key} x{count}" for key, count in counter.most_common()) or "-"


def report(outcome: Outcomes, args: argparse.Namespace) -> None:
    setting = SETTINGS[outcome.setting]
    print(f"\n[{outcome.setting}] worker niceness +{setting.worker_niceness}, {outcome.loops} busy loops at "
          f"+{setting.loop_niceness} for {outcome.loop_seconds:.0f} s; model latency {args.latency} s")
    print(f"  runs: {outcome.reports}/{outcome.runs} completed with their report, {outcome.failed} failed, "
          f"{outcome.no_report} ended without a report, {outcome.running} still running"
          f"{' (at the time-out)' if outcome.running else ''}")
    print(f"  exactly once: {'yes' if not outcome.not_once else 'NO'}"
          + "".join(f"\n    {problem}" for problem in outcome.not_once))
    print(f"  wall time: {outcome.wall_seconds:.1f} s (first start -> last close); kill at {outcome.kill_at:.1f} s "
          f"after {outcome.calls_at_kill} model calls (load average {outcome.load_at_kill:.1f}); "
          f"replacement polled {outcome.replacement_polls_after:.1f} s after the kill")
    print(f"  retried attempts by the failure before the last: {counts(outcome.retries)}")
    print(f"  activities given up (no retry left): {counts(outcome.given_up)}")
    print(f"  failed runs: {counts(outcome.failures)}")
    print(f"  activities scheduled per run: {counts(outcome.activities)}")
    print(f"  peak RSS: {rss(outcome)} (the process / with its children)")


async def main() -> None:
    args = arguments()
    header(f"overload: {args.runs} runs, worker SIGKILLed mid-load, busy loops for {args.load_seconds:.0f} s")
    outcomes = []
    for name in args.settings.split(","):
        outcome = await run_setting(SETTINGS[name], args)
        report(outcome, args)
        outcomes.append(outcome)
    print("\n| Setting | Completed with report | Failed | No report | Running | Once | Wall | Retries by cause "
          "| Given up | Load at kill | Peak RSS |")
    print("|---|---:|---:|---:|---:|---|---:|---|---|---:|---|")
    for o in outcomes:
        print(f"| {o.setting} | {o.reports}/{o.runs} | {o.failed} | {o.no_report} | {o.running} "
              f"| {'yes' if not o.not_once else 'NO'} | {o.wall_seconds:.0f} s | {counts(o.retries)} "
              f"| {counts(o.given_up)} | {o.load_at_kill:.1f} | {rss(o)} |")
    if not all(outcome.met for outcome in outcomes):
        print("\nNot every run completed with its report, exactly once.", flush=True)
        exit_now(1)  # every process this bench started has been stopped (bench_stack, finally)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="concurrent runs per setting")
    parser.add_argument("--settings", default="equal,starved", help="comma-separated: equal, starved")
    parser.add_argument("--load-seconds", type=float, default=240.0,
                        help="how long the busy loops run (the starvation: 240 s in the issue)")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per model call")
    parser.add_argument("--kill-calls", type=int, default=0,
                        help="SIGKILL the worker once the model has answered this many calls (default 4 per run)")
    parser.add_argument("--kill-after", type=float, default=60.0, help="... or after this many seconds")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds to wait for the runs to end")
    args = parser.parse_args()
    if unknown := set(args.settings.split(",")) - SETTINGS.keys():
        parser.error(f"unknown settings {sorted(unknown)}; choose from {sorted(SETTINGS)}")
    return args


if __name__ == "__main__":
    run_main(main())
