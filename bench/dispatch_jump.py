"""Workflow-task dispatch against history size, dev-server storage and the product: the "32 KB jump".

Run from the repository root: ``.venv/bin/python bench/dispatch_jump.py`` (about 1.5 minutes;
``--plan-steps 3 --plan-steps 8`` adds research runs on ``worker.py``, about 2.5 minutes more).

Why: the research run's workflow tasks were seen to take ~2 ms to dispatch (activity completed ->
workflow task started, both server timestamps, so no worker code is inside) until its history
passed ~32 KB, then 30-35 ms. This script takes the product out: a trivial workflow
(``grow_workflow.py``) with a plain SDK worker (default converter, no codec). Its first activity
returns ``--pad`` bytes, which sets the history's size; then it runs ``--steps`` sequential
activities of ``--seconds`` each with ``--step-bytes`` results, so every later workflow task is
dispatched at that size. Pads are interleaved round by round, so all see the same machine load;
each dev-server storage (in memory; SQLite with the server's default rollback journal; SQLite in
WAL mode, as the embedded default runs it) gets its own server. The server's own metrics
(``--metrics-port``) are scraped around each run, to show which operation takes the time.
Finding (bench/README.md): history size changes nothing; the rollback journal's commit does.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import tempfile
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from grow_workflow import GROW_TASK_QUEUE, GrowWorkflow, blob
from harness import bench_stack, event_time, header, median, run_main, timed_run
from temporalio.api.enums.v1 import EventType, TaskQueueKind
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from runtime.connection import connect_when_ready
from runtime.embedded import DEV_SERVER_STORAGE_FLAGS, free_port
from tests.support.processes import TEMPORAL_CLI, wait_for_port
from tests.support.runs import QUESTION
from workflows.contracts.research import ResearchRequest

COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
WFT_SCHEDULED = EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
WFT_STARTED = EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
STICKY = TaskQueueKind.TASK_QUEUE_KIND_STICKY
# Server histograms worth comparing: (metric, label that names the operation).
HISTOGRAMS = (("persistence_latency", "operation"), ("service_latency", "operation"),
              ("task_latency_queue", "operation"), ("task_latency_processing", "operation"),
              ("history_workflow_execution_cache_lock_hold_duration", "operation"))
# How the dev server keeps its state: in memory, or in a SQLite file with the server's own default
# (a rollback journal, synchronous=FULL) or with the pragmas the embedded default now passes.
ROLLBACK = ("--sqlite-pragma", "journal_mode=delete", "--sqlite-pragma", "synchronous=full")
STORAGES: dict[str, tuple[str, ...] | None] = {"memory": None, "rollback": ROLLBACK, "wal": DEV_SERVER_STORAGE_FLAGS}
# The server's steps between an activity's completion and the next workflow task: the completion's
# write, then the transfer task's AddWorkflowTask to matching (which starts the task on the worker's poll).
KEY_OPERATIONS = (("persistence_latency", "UpdateWorkflowExecution"),
                  ("service_latency", "RespondActivityTaskCompleted"), ("service_latency", "AddWorkflowTask"))
SPLIT_KIB = 32  # where the research run's dispatch was seen to jump
SAMPLE = re.compile(r'^(\w+)_(sum|count)\{([^}]*)\} (\S+)$')


@dataclass(frozen=True)
class Dispatch:
    history_bytes: int  # the history's size when the activity completed
    seconds: float  # activity completed -> workflow task started
    waited: float  # activity completed -> workflow task scheduled: another task of the run was in flight
    sticky: bool  # the task was scheduled on the worker's sticky queue


def dispatches(history: WorkflowHistory) -> list[Dispatch]:
    """For each activity completion, the time until the next workflow task started, with the history size then."""
    found, size, completed_at, scheduled_at, sticky = [], 0, None, None, False
    for event in history.events:
        size += event.ByteSize()
        if event.event_type == COMPLETED and completed_at is None:
            completed_at = event_time(event)
        elif event.event_type == WFT_SCHEDULED:
            scheduled_at = event_time(event)
            sticky = event.workflow_task_scheduled_event_attributes.task_queue.kind == STICKY
        elif event.event_type == WFT_STARTED and completed_at is not None and scheduled_at is not None:
            found.append(Dispatch(size, (event_time(event) - completed_at).total_seconds(),
                                  (scheduled_at - completed_at).total_seconds(), sticky))
            completed_at = None
    return found


def scrape(port: int) -> dict[tuple[str, str], tuple[float, float]]:
    """(metric, operation) -> (sum seconds, count), summed over the server's other labels."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    wanted = dict(HISTOGRAMS)
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match or match[1] not in wanted:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match[3]))
        key = (match[1], labels.get(wanted[match[1]], "?"))
        totals[key][0 if match[2] == "sum" else 1] += float(match[4])
    return {key: (value[0], value[1]) for key, value in totals.items()}


def difference(after: dict[tuple[str, str], tuple[float, float]], before: dict[tuple[str, str], tuple[float, float]]
               ) -> dict[tuple[str, str], tuple[float, float]]:
    return {key: (value[0] - before.get(key, (0, 0))[0], value[1] - before.get(key, (0, 0))[1])
            for key, value in after.items() if value[1] > before.get(key, (0, 0))[1]}


@contextlib.contextmanager
def dev_server(storage: str, extra: list[str]) -> Iterator[tuple[str, int]]:
    """``temporal server start-dev`` on free loopback ports, keeping its state as :data:`STORAGES` says.

    Yields (frontend address, metrics port)."""
    port, metrics = free_port(), free_port()
    command = [TEMPORAL_CLI, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
               "--metrics-port", str(metrics), "--headless", "--log-level", "error"]
    pragmas = STORAGES[storage]
    with tempfile.TemporaryDirectory(prefix="deerflow-dispatch-") as tmp:
        if pragmas is not None:
            command += ["--db-filename", str(Path(tmp) / "temporal.db"), *pragmas]
        process = subprocess.Popen([*command, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        try:
            wait_for_port(port)
            wait_for_port(metrics)
            yield f"127.0.0.1:{port}", metrics
        finally:
            process.terminate()
            process.wait(timeout=30)


@dataclass
class Condition:
    pad: int
    step_bytes: int
    rows: list[Dispatch]
    server: dict[tuple[str, str], list[float]]  # (metric, operation) -> [sum, count] over its runs


async def measure(client: Client, metrics: int, pads: list[int], step_sizes: list[int], steps: int, seconds: float,
                  rounds: int) -> list[Condition]:
    conditions = [Condition(pad, step_bytes, [], defaultdict(lambda: [0.0, 0.0]))
                  for step_bytes in step_sizes for pad in pads]
    async with Worker(client, task_queue=GROW_TASK_QUEUE, workflows=[GrowWorkflow], activities=[blob]):
        await client.execute_workflow(GrowWorkflow.run, args=[[10, 10], 0.0], id=f"warm-{uuid.uuid4()}",
                                      task_queue=GROW_TASK_QUEUE)
        for _ in range(rounds):
            for condition in conditions:
                before = scrape(metrics)
                handle = await client.start_workflow(
                    GrowWorkflow.run, args=[[condition.pad] + [condition.step_bytes] * steps, seconds],
                    id=f"grow-{uuid.uuid4()}", task_queue=GROW_TASK_QUEUE)
                await handle.result()
                for key, (total, count) in difference(scrape(metrics), before).items():
                    condition.server[key][0] += total
                    condition.server[key][1] += count
                condition.rows.extend(dispatches(await handle.fetch_history())[1:])  # after the pad's completion
    return conditions


def report(conditions: list[Condition], verbose: bool) -> None:
    for condition in conditions:
        sizes = [row.history_bytes for row in condition.rows]
        print(f"  pad {condition.pad // 1024:>4} KiB, steps of {condition.step_bytes:>6} B "
              + summary(f"(history {min(sizes) / 1024:.0f}-{max(sizes) / 1024:.0f} KiB)", condition.rows), flush=True)
    print("  server, mean per call over every run above: " + ", ".join(
        f"{operation} {mean_ms(conditions, (metric, operation)):.1f} ms" for metric, operation in KEY_OPERATIONS))
    if not verbose:
        return
    first, last = conditions[0], conditions[-1]
    print(f"  server operations, mean ms per call: pad {first.pad // 1024} KiB -> pad {last.pad // 1024} KiB")
    for key in sorted(set(first.server) & set(last.server)):
        before, after = mean_ms([first], key), mean_ms([last], key)
        if max(before, after) >= 1.0:
            print(f"    {key[0]:<28} {key[1]:<30} {before:7.1f} -> {after:7.1f}")


def mean_ms(conditions: list[Condition], key: tuple[str, str]) -> float:
    total = sum(condition.server[key][0] for condition in conditions if key in condition.server)
    count = sum(condition.server[key][1] for condition in conditions if key in condition.server)
    return total / count * 1000 if count else float("nan")


def summary(label: str, rows: list[Dispatch]) -> str:
    if not rows:
        return f"{label}: none"
    values = sorted(row.seconds * 1000 for row in rows)
    sticky = sum(row.sticky for row in rows)
    waited = [row.waited * 1000 for row in rows if row.waited > 0.001]
    behind = f"; {len(waited)} waited for a task in flight, median {median(waited):.1f} ms" if waited else ""
    return (f"{label}: dispatch median {median(values):5.1f} ms, p25 {values[len(values) // 4]:5.1f}, "
            f"p75 {values[3 * len(values) // 4]:5.1f}, n={len(values)}, sticky {sticky}/{len(rows)}{behind}")


async def product(storage: str, plan_steps: list[int], rounds: int, model_latency: float) -> None:
    """Research runs on ``worker.py`` (the product as deployed), dispatch split at :data:`SPLIT_KIB` of history."""
    async with bench_stack(server_args=list(STORAGES[storage] or ())) as stack:
        await timed_run(stack, ResearchRequest(question=QUESTION, auto_accept_plan=True), "warm")
        stack.set_latency(model_latency, model_latency / 5)
        print(f"research runs on worker.py (dev server: {storage}), model {model_latency} s per call, "
              f"{rounds} rounds:")
        rows: dict[int, list[Dispatch]] = defaultdict(list)
        for _ in range(rounds):
            for steps in plan_steps:
                request = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=steps)
                handle, _, _ = await timed_run(stack, request, f"dispatch-{steps}")
                rows[steps].extend(dispatches(await handle.fetch_history()))
        for steps in plan_steps:
            size = max(row.history_bytes for row in rows[steps]) / 1024
            below = [row for row in rows[steps] if row.history_bytes <= SPLIT_KIB * 1024]
            above = [row for row in rows[steps] if row.history_bytes > SPLIT_KIB * 1024]
            print(f"  plan of {steps} steps (history up to {size:.0f} KiB):")
            print(f"    {summary(f'history <= {SPLIT_KIB} KiB', below)}")
            print(f"    {summary(f'history  > {SPLIT_KIB} KiB', above)}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pad", type=int, action="append", help="bytes of the first activity's result (repeatable)")
    parser.add_argument("--step-bytes", type=int, action="append", help="each later activity's result (repeatable)")
    parser.add_argument("--steps", type=int, default=6, help="activities after the pad, per run")
    parser.add_argument("--seconds", type=float, default=0.2, help="each activity's duration")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--storage", choices=list(STORAGES), action="append", help="default: all (repeatable)")
    parser.add_argument("--server-arg", action="append", default=[], help="extra dev-server flag")
    parser.add_argument("--server-metrics", action="store_true", help="print the server's operation latencies")
    parser.add_argument("--plan-steps", type=int, action="append",
                        help="also time research runs on worker.py with plans of these sizes (repeatable)")
    parser.add_argument("--model-latency", type=float, default=0.5, help="fake model latency for --plan-steps")
    args = parser.parse_args()
    pads = args.pad or [0, 16 * 1024, 48 * 1024, 128 * 1024]
    header("Workflow task dispatch against history size")
    storages = args.storage or list(STORAGES)
    for storage in storages:
        with dev_server(storage, args.server_arg) as (address, metrics):
            client = await connect_when_ready(address)
            print(f"dev server ({storage}; extra flags: {args.server_arg or 'none'}), {args.steps} activities of "
                  f"{args.seconds} s after the pad, {args.rounds} rounds:")
            conditions = await measure(client, metrics, pads, args.step_bytes or [100], args.steps,
                                       args.seconds, args.rounds)
            report(conditions, args.server_metrics)
    for storage in (storage for storage in storages if args.plan_steps and storage != "memory"):
        await product(storage, args.plan_steps, args.rounds, args.model_latency)


if __name__ == "__main__":
    run_main(main())
