"""Overhead from the first run: a run's wall time over the model time it waits for, and its hops.

Run from the repository root: ``.venv/bin/python bench/overhead.py`` (about 5 minutes; twice that
with ``--baseline-worker``).

Why it is measured this way: the fake model answers every call in exactly 1 s and nothing else is
slowed (search answers at once, the crawler reads a page served here), so a run would take
(model calls x 1 s) if durability cost nothing; the ratio wall / (calls x 1 s) is what it costs,
start-up included. The denominator holds the model's latency only: whatever the worker spends on
anything else (imports, the sandbox, the extraction fork server, dispatch, blob writes, the tools
themselves) counts against it, as an operator sees it. Each round starts a new worker process and
a run N seconds later (N = 0: at once, so the run waits for the worker to poll; 4: right after a
deploy or a crash; 20: start-up long done), then a second run on the same worker (warm).

Hops: at the fake model, the time from one reply to the next request, by what happened in between:
``model`` (straight to the next call), or a tool (``web_search``, ``crawl_tool``,
``python_repl_tool``), whose own time (its activity's started -> completed, from history) is
shown beside it; the target is tool hop <= model hop + 20 ms + the tool's own time.

The platform's floor: on the same dev server, a workflow that does nothing but run the same number
of activities one after another (one per model call holding exactly the model's latency, the others
returning at once), in this process, unsandboxed, with no payload codec. Its ratio is what Temporal
itself (server, SDK, the hops between them) costs a run of this shape here, whatever a worker does;
this tree's readings minus it are ours.

Options: ``--runs N`` rounds (medians reported); ``--baseline-worker PATH`` also runs the
``worker.py`` at PATH (e.g. an export of main: ``git archive main | tar -x -C DIR``) on its own dev
server and fakes, alternating with this tree's run for run, so both see the same machine load and a
change is measured A/B in one invocation; ``--server-arg ARG`` passes flags to ``temporal server
start-dev``; ``--models-latency SECONDS`` makes the fake model's ``/v1/models`` (the context window a
worker asks each tier's provider for) answer that long after its request, as a hosted provider's
does over a new connection (0 by default, so the figures stay comparable with earlier ones).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from harness import (
    CRAWL_LOOPBACK,
    REPO,
    Stack,
    activity_spans,
    bench_stack,
    header,
    html_page,
    median,
    ms,
    page_index,
    run_main,
    serve_pages,
    timed_run,
    verdict,
)
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.support.runs import QUESTION
from workflows.contracts.research import ResearchRequest

MODEL_LATENCY = 1.0
STARTS = (0.0, 4.0, 20.0)  # seconds from the worker's process start to the run's start
TARGETS = {"started 4 s before": 1.05, "warm": 1.04}
HOP_ALLOWANCE = 0.020  # a tool hop may cost this much more than a model hop, beside the tool's own time
TOOLS = ("web_search", "crawl_tool", "python_repl_tool")
PAGE = "/solid-state-batteries"  # the one page every search returns, so each step crawls once


@dataclass(frozen=True)
class Hop:
    kind: str  # "model" or the tool that ran between the reply and the next request
    gap: float  # seconds from the model's reply to its next request
    tool: float  # the tool activities' own time inside the gap (0 for a model hop)


@dataclass(frozen=True)
class Reading:
    label: str  # "started N s before" or "warm"
    wall: float
    calls: int
    hops: list[Hop]
    activities: int  # every activity the run completed, its model calls included

    @property
    def ratio(self) -> float:
        return self.wall / (self.calls * MODEL_LATENCY)


FLOOR_QUEUE = "overhead-floor"


@activity.defn
async def hold(seconds: float) -> None:
    """A stand-in for one activity of the run: a model call's latency, or nothing for the others."""
    await asyncio.sleep(seconds)


@workflow.defn
class FloorWorkflow:
    """The run's activities one after another, and nothing else."""

    @workflow.run
    async def run(self, holds: list[float]) -> None:
        for seconds in holds:
            await workflow.execute_activity(hold, seconds, start_to_close_timeout=timedelta(minutes=1))


async def floor_readings(stack: Stack, calls: int, others: int, runs: int) -> list[float]:
    """The platform's floor for a run of ``calls`` model calls and ``others`` other activities, as
    wall / (calls x latency), ``runs`` times (the first, the server's first of this workflow, not kept)."""
    holds = [MODEL_LATENCY] * calls + [0.0] * others
    client = Client(**{**stack.client.config(), "data_converter": DataConverter.default})
    ratios = []
    async with Worker(client, task_queue=FLOOR_QUEUE, workflows=[FloorWorkflow], activities=[hold],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        for number in range(runs + 1):
            began = time.perf_counter()
            await client.execute_workflow(FloorWorkflow.run, holds if number else [0.0],
                                                id=f"overhead-floor-{time.time_ns()}", task_queue=FLOOR_QUEUE)
            if number:
                ratios.append((time.perf_counter() - began) / (calls * MODEL_LATENCY))
    return ratios


def label(start: float) -> str:
    return f"started {start:g} s before"


def hop_kind(request: dict[str, Any]) -> str:
    """What ran between the previous reply and ``request``: the tool whose results it ends with, or
    ``model`` where it ends with no tool result (the next agent, or the same one after a step)."""
    messages = request.get("messages") or []
    if not messages or messages[-1].get("role") != "tool":
        return "model"
    asked = next(m for m in reversed(messages) if m.get("role") == "assistant")
    names = {call["function"]["name"] for call in asked.get("tool_calls") or []}
    return "+".join(sorted(names))


async def one_run(stack: Stack, name: str, number: int) -> Reading:
    """One research run; its model calls and hops are read from the fake model's records."""
    first = len(stack.model.arrivals)
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True)
    handle, _, wall = await timed_run(stack, request, f"overhead-{number}")
    arrivals, replies = stack.model.arrivals[first:], stack.model.replies[first:]
    bodies = stack.model.requests[first:]
    # History times are the server's wall clock, the fake's are monotonic: one offset maps them.
    offset = time.time() - time.monotonic()
    every = activity_spans(await handle.fetch_history())
    spans = [s for s in every if s.activity_type in TOOLS]
    # The run's model calls are its chat activities: a worker's own extra calls (the tool-support
    # probe of its first run) are overhead, not calls the run needed.
    calls = sum(1 for s in every if s.activity_type == "chat")
    hops = []
    for reply, arrival, body in zip(replies, arrivals[1:], bodies[1:], strict=False):
        inside = [s.seconds for s in spans
                  if reply + offset <= s.started.timestamp() and s.completed.timestamp() <= arrival + offset]
        hops.append(Hop(hop_kind(body), arrival - reply, max(inside, default=0.0)))
    return Reading(name, wall, calls, hops, len(every))


async def round_on(stack: Stack, start: float, number: int) -> list[Reading]:
    """A new worker process, a run ``start`` seconds after it was started, then a run on it warm."""
    stack.worker.stop()
    began = time.monotonic()
    stack.worker.start()
    await asyncio.sleep(max(0.0, began + start - time.monotonic()))
    cold = await one_run(stack, label(start), number)
    return [cold, await one_run(stack, "warm", number)]


def report(name: str, readings: list[Reading]) -> dict[str, float]:
    """Print a tree's medians by reading and its hops by kind; returns the medians by label."""
    by_label: dict[str, list[Reading]] = defaultdict(list)
    for reading in readings:
        by_label[reading.label].append(reading)
    medians = {}
    for key, group in by_label.items():
        medians[key] = median(r.ratio for r in group)
        runs = ", ".join(f"{r.ratio:.3f}" for r in group)
        print(f"{name}: {key}: wall / (calls x {MODEL_LATENCY:g} s) median {medians[key]:.3f} "
              f"({runs}; {group[0].calls} model calls, median wall {median(r.wall for r in group):.2f} s)")
    hops: dict[str, list[Hop]] = defaultdict(list)
    for reading in by_label["warm"]:
        for hop in reading.hops:
            hops[hop.kind].append(hop)
    model_hop = median(h.gap for h in hops.get("model", [])) if "model" in hops else 0.0
    for kind, found in sorted(hops.items()):
        gap, tool = median(h.gap for h in found), median(h.tool for h in found)
        line = f"{name}: warm hop {kind}: median {ms(gap)} over {len(found)} hops"
        if kind != "model":
            limit = model_hop + HOP_ALLOWANCE + tool
            line += (f"; the tool's own time {ms(tool)}, so {ms(gap - tool)} beside it "
                     f"(target <= model hop + 20 ms + tool = {ms(limit)}: {verdict(gap <= limit)})")
        print(line)
    return medians


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds: each tree, each N, then warm")
    parser.add_argument("--server-arg", action="append", default=[], help="extra dev-server flag")
    parser.add_argument("--baseline-worker", type=Path, help="A/B: another tree's worker.py, runs alternating")
    parser.add_argument("--models-latency", type=float, default=0.0,
                        help="seconds the fake model's /v1/models takes, as a hosted provider's list does")
    args = parser.parse_args()
    header("Overhead from the first run")
    trees = {"this tree": REPO / "worker.py"}
    if args.baseline_worker:
        trees["baseline"] = args.baseline_worker.resolve()
    print(f"workers: {', '.join(f'{k}: {v}' for k, v in trees.items())}; "
          f"dev server flags: {args.server_arg or 'none'}; model list latency {args.models_latency:g} s")
    readings: dict[str, list[Reading]] = {name: [] for name in trees}
    with serve_pages({PAGE: html_page("Solid-state batteries", 20_000)}) as base_url:
        async with contextlib.AsyncExitStack() as stacks:
            stacks_by_name = {}
            for name, script in trees.items():
                stack = await stacks.enter_async_context(
                    bench_stack(server_args=args.server_arg, worker_script=script, worker_env=CRAWL_LOOPBACK))
                stack.search.index = page_index(base_url, [PAGE])
                await one_run(stack, "warm-up", 0)  # the dev server's first run, at zero latency
                stack.model.latency_seconds = MODEL_LATENCY
                stack.model.models_latency_seconds = args.models_latency
                stacks_by_name[name] = stack
            for number, start in itertools.product(range(1, args.runs + 1), STARTS):
                for name, stack in stacks_by_name.items():  # alternating, so all see the same load
                    readings[name].extend(await round_on(stack, start, number))
            warm = next(r for r in readings["this tree"] if r.label == "warm")
            floors = await floor_readings(stacks_by_name["this tree"], warm.calls, warm.activities - warm.calls,
                                          args.runs)
    medians = {name: report(name, found) for name, found in readings.items()}
    floor = median(floors)
    print(f"platform floor ({warm.activities} activities, {warm.calls} of them {MODEL_LATENCY:g} s, nothing else): "
          f"wall / (calls x {MODEL_LATENCY:g} s) median {floor:.3f} ({', '.join(f'{r:.3f}' for r in floors)})")
    for key, target in TARGETS.items():
        ours = medians["this tree"][key]
        against = f" (baseline {medians['baseline'][key]:.3f})" if "baseline" in medians else ""
        print(f"{key}: {ours:.3f}{against}, {ours - floor:+.3f} over the floor; target <= {target}: "
              f"{verdict(ours <= target)}")


if __name__ == "__main__":
    run_main(main())
