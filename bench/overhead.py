"""Orchestration overhead: how much longer a run takes than the model and tool calls it waits for.

Run from the repository root: ``.venv/bin/python bench/overhead.py`` (about 1 minute).

Why it is measured this way: with the model at a fixed 1 s per call and search at 0.3 s, almost
all of a default run (3 steps, plan auto-accepted) is waiting on providers; what is left is what
Temporal and the workflow add. The critical path is read from the run's own history: activities
run one after another except the concurrent tool calls of one model turn, so it is the sum over
groups of time-overlapping activities of the longest one (completed - started). The ratio
wall / critical path is the overhead; the gap between one activity's completion and the next
one's start is split into its parts (workflow task dispatch, workflow task processing on the
worker, activity dispatch) to show where it goes.

Options: ``--runs N`` measured runs (median reported); ``--cold`` starts a new worker process
before each measured run and starts the run as soon as that process polls (its warm-up, the model
libraries' import and the sandbox's fork server, may still be running), instead of measuring
after a warm-up run; ``--baseline-worker PATH`` also runs the
``worker.py`` at PATH (e.g. an export of main: ``git archive main | tar -x -C DIR``) on its own
dev server and fakes, alternating its runs with this tree's, so both see the same machine load and
a change is measured A/B in one invocation; ``--tuned`` starts ``bench/tuned_worker.py``
(Worker knobs from ``BENCH_*`` env vars) instead of ``worker.py``; ``--server-arg ARG`` passes
flags to ``temporal server start-dev`` (e.g. ``--server-arg=--dynamic-config-value
--server-arg=system.enableActivityEagerExecution=true``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from floor_workflow import FLOOR_TASK_QUEUE, FloorWorkflow, nap
from harness import (
    REPO,
    Span,
    Stack,
    activity_spans,
    bench_stack,
    event_time,
    header,
    median,
    ms,
    overlap_groups,
    pragma_args,
    run_main,
    timed_run,
    verdict,
)
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from tests.support.runs import QUESTION
from workflows.models import ResearchRequest

MODEL_LATENCY = 1.0
SEARCH_LATENCY = 0.3
TARGET = 1.03
WFT_STARTED = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED


@dataclass
class Measurement:
    wall: float
    critical: float
    injected: float
    activities: int
    durations: list[float]  # per sequential group, the longest activity: the critical path's steps
    gaps: list[float]  # completion of one group -> start of the next
    wft_dispatch: list[float]  # completion -> workflow task started
    wft_processing: list[float]  # workflow task started -> next activity scheduled
    activity_dispatch: list[float]  # activity scheduled -> started
    head: float  # client start -> first activity started, incl. the start RPC
    tail: float  # last activity completed -> result received by the client


def injected_latency(span: Span) -> float:
    return {"chat": MODEL_LATENCY, "web_search": SEARCH_LATENCY}.get(span.activity_type, 0.0)


def measure(history: WorkflowHistory, wall: float) -> Measurement:
    spans = activity_spans(history)
    groups = overlap_groups(spans)
    wft_starts = [event_time(e) for e in history.events if e.event_type == WFT_STARTED]
    gaps, wft_dispatch, wft_processing, activity_dispatch = [], [], [], []
    for previous, following in itertools.pairwise(groups):
        done = max(span.completed for span in previous)
        first = min(following, key=lambda span: span.started)
        gaps.append((first.started - done).total_seconds())
        # The workflow task that scheduled the next activity is the last one started before it.
        task = max((t for t in wft_starts if done <= t <= first.scheduled), default=first.scheduled)
        wft_dispatch.append((task - done).total_seconds())
        wft_processing.append((first.scheduled - task).total_seconds())
        activity_dispatch.append((first.started - first.scheduled).total_seconds())
    workflow_started = event_time(history.events[0])
    workflow_closed = event_time(history.events[-1])
    server_span = (workflow_closed - workflow_started).total_seconds()
    head = (spans[0].started - workflow_started).total_seconds()
    tail = (workflow_closed - max(span.completed for span in spans)).total_seconds()
    client_extra = wall - server_span  # start RPC before the first event, result delivery after the last
    return Measurement(
        wall=wall,
        critical=sum(max(span.seconds for span in group) for group in groups),
        durations=[max(span.seconds for span in group) for group in groups],
        injected=sum(max(injected_latency(span) for span in group) for group in groups),
        activities=len(spans), gaps=gaps, wft_dispatch=wft_dispatch,
        wft_processing=wft_processing, activity_dispatch=activity_dispatch,
        head=head + client_extra / 2, tail=tail + client_extra / 2,
    )


async def product_run(stack: Stack, number: int, *, cold: bool = False) -> Measurement:
    if cold:
        await stack.restart_worker()
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True)
    handle, _, wall = await timed_run(stack, request, f"overhead-{number}")
    return measure(await handle.fetch_history(), wall)


async def floor_run(client: Client, durations: list[float], number: int) -> Measurement:
    """A trivial workflow whose sequential activities sleep as long as the research run's steps took."""
    began = time.perf_counter()
    handle = await client.start_workflow(FloorWorkflow.run, durations, id=f"floor-{number}",
                                         task_queue=FLOOR_TASK_QUEUE)
    await handle.result()
    return measure(await handle.fetch_history(), time.perf_counter() - began)


def breakdown(runs: list[Measurement]) -> str:
    def pooled(values: Callable[[Measurement], list[float]]) -> str:
        return ms(median(value for run in runs for value in values(run)))

    return (f"gap {pooled(lambda r: r.gaps)} = workflow task dispatch {pooled(lambda r: r.wft_dispatch)} "
            f"+ workflow task processing {pooled(lambda r: r.wft_processing)} "
            f"+ activity dispatch {pooled(lambda r: r.activity_dispatch)}; "
            f"head {ms(median(r.head for r in runs))}, tail {ms(median(r.tail for r in runs))}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="a new worker process for each measured run")
    parser.add_argument("--tuned", action="store_true", help="run bench/tuned_worker.py (BENCH_* knobs)")
    parser.add_argument("--sqlite-pragma", action="append", default=[], help="e.g. synchronous=OFF")
    parser.add_argument("--server-arg", action="append", default=[], help="extra dev-server flag")
    parser.add_argument("--baseline-worker", type=Path, help="A/B: another tree's worker.py, runs alternating")
    args = parser.parse_args()
    header("Orchestration overhead")
    server_args = [*args.server_arg, *pragma_args(args.sqlite_pragma)]
    script = REPO / ("bench/tuned_worker.py" if args.tuned else "worker.py")
    print(f"worker: {script.relative_to(REPO)}{' (a new process for each run)' if args.cold else ''}; "
          f"dev server flags: {server_args or 'none'}")
    runs: list[Measurement] = []
    floors: list[Measurement] = []
    baselines: list[Measurement] = []
    async with contextlib.AsyncExitStack() as stacks:
        stack = await stacks.enter_async_context(bench_stack(server_args=server_args, worker_script=script))
        baseline = None
        if args.baseline_worker:
            print(f"baseline worker: {args.baseline_worker}")
            baseline = await stacks.enter_async_context(
                bench_stack(server_args=server_args, worker_script=args.baseline_worker.resolve()))
        floor_client = await Client.connect(stack.server.address)
        async with Worker(floor_client, task_queue=FLOOR_TASK_QUEUE, workflows=[FloorWorkflow], activities=[nap]):
            for warm in (stack, baseline):  # warm-up at zero latency: imports, sandbox probe, connections
                if warm is not None:
                    await product_run(warm, 0)
                    warm.set_latency(MODEL_LATENCY, SEARCH_LATENCY)
            await floor_run(floor_client, [0.1, 0.1], 0)
            for number in range(1, args.runs + 1):  # interleaved, so all see the same machine load
                runs.append(await product_run(stack, number, cold=args.cold))
                floors.append(await floor_run(floor_client, runs[-1].durations, number))
                if baseline is not None:
                    baselines.append(await product_run(baseline, number, cold=args.cold))
    for number, (run, floor) in enumerate(zip(runs, floors, strict=True), 1):
        print(f"run {number}: wall {run.wall:.2f} s, critical path {run.critical:.2f} s "
              f"({run.activities} activities in {len(run.durations)} sequential groups), "
              f"injected {run.injected:.2f} s; "
              f"wall/critical {run.wall / run.critical:.3f}, wall/injected {run.wall / run.injected:.3f}, "
              f"median gap {ms(median(run.gaps))}; floor wall/critical {floor.wall / floor.critical:.3f}")
    wall_over_critical = median(run.wall / run.critical for run in runs)
    print(f"median wall {median(r.wall for r in runs):.2f} s; critical path {median(r.critical for r in runs):.2f} s;"
          f" injected latency {median(r.injected for r in runs):.2f} s")
    print(f"research run, per activity (median): {breakdown(runs)}")
    print("floor workflow (same server; in-bench worker; one sleeping activity per critical-path step, as long "
          f"as that step took): {breakdown(floors)}; wall/critical {median(f.wall / f.critical for f in floors):.3f}")
    print("(the floor's ratio is what any workflow with these activity timings gets here; the research run's "
          "excess over it is this product's own cost)")
    for number, run in enumerate(baselines, 1):
        print(f"baseline run {number}: wall {run.wall:.2f} s, critical path {run.critical:.2f} s "
              f"({run.activities} activities in {len(run.durations)} sequential groups); "
              f"wall/critical {run.wall / run.critical:.3f}, wall/injected {run.wall / run.injected:.3f}")
    if baselines:
        print(f"baseline, per activity (median): {breakdown(baselines)}; wall/critical "
              f"{median(r.wall / r.critical for r in baselines):.3f}, wall/injected "
              f"{median(r.wall / r.injected for r in baselines):.3f}, "
              f"median wall {median(r.wall for r in baselines):.2f} s")
    met = verdict(wall_over_critical <= TARGET)
    print(f"wall / critical path: {wall_over_critical:.3f} (target <= {TARGET}: {met})")
    print(f"wall / injected latency only: {median(run.wall / run.injected for run in runs):.3f}")


if __name__ == "__main__":
    run_main(main())
