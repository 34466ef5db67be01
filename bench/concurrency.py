"""Concurrency: 200 runs at once on one worker process, then 1,000 runs paused at plan review.

Run from the repository root: ``.venv/bin/python bench/concurrency.py`` (about 12-15 minutes on
2 shared cores; ``--cache-sizes 1000`` alone takes about 8).

Why it is measured this way: one worker process has to carry many runs at once, both busy ones
(every run a stream of small activities) and idle ones (waiting days for a person). Memory is
sampled from /proc every 0.2 s: the RSS of the worker process, and the PSS of its process tree
(python_repl_tool runs each snippet in child interpreters; PSS, unlike a sum of RSS, does not
count twice the pages a just-forked child still shares with the worker). The CPU seconds of the
worker, the dev server and this bench are read from /proc, to show which of them sets the pace.
The fakes answer in 0.05 s.

Phase 1: 200 default runs (3 steps, auto-accepted) started together on ``worker.py``: throughput,
failures and peak memory.
Phase 2: 1,000 runs started without auto-accept, so each stops at ``awaiting_review`` (counted
through the ``DeerFlowPhase`` search attribute); the tree's RSS is read after a short settle, then one batch
operation terminates them. Phase 2 runs on a fresh stack per ``max_cached_workflows`` value with
``bench/tuned_worker.py`` (``worker.py`` plus those knobs and a Prometheus endpoint), so the
worker's own ``temporal_sticky_cache_size`` says how many paused runs it keeps in memory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
import urllib.request
import uuid
from dataclasses import dataclass

from harness import (
    REPO,
    RssSampler,
    Stack,
    bench_stack,
    cpu_seconds,
    header,
    pragma_args,
    run_main,
    start_run,
    timed_run,
    tree_memory,
    verdict,
)
from temporalio.api.batch.v1 import BatchOperationTermination
from temporalio.api.workflowservice.v1 import StartBatchOperationRequest

from tests.support.processes import free_port
from tests.support.runs import QUESTION
from workflows.contracts.research import ResearchRequest

LATENCY = 0.05
BURST, PAUSED = 200, 1000  # --burst / --paused change them, e.g. for a quick try-out
RSS_TARGET_MIB = 400  # the brief's "400 MB", read as MiB (400 MB in SI units is 381 MiB)
SETTLE_SECONDS = 5.0
START_CONCURRENCY = 100
AWAITING_QUERY = 'DeerFlowPhase = "awaiting_review"'
RUNNING_QUERY = 'ExecutionStatus = "Running"'


class CpuMeter:
    """CPU seconds the worker and the dev server spend between start and stop."""

    def __init__(self, stack: Stack) -> None:
        assert stack.server.process is not None
        self.pids = {"worker": stack.worker.pid, "dev server": stack.server.process.pid,
                     "bench (fakes, client)": os.getpid()}
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.began = time.perf_counter()

    def report(self) -> str:
        elapsed = time.perf_counter() - self.began
        used = {name: cpu_seconds(pid) - self.before[name] for name, pid in self.pids.items()}
        return ", ".join(f"{name} {seconds:.0f} CPU s ({seconds / elapsed:.0%} of one core)"
                         for name, seconds in used.items())


async def burst(stack: Stack) -> None:
    """Phase 1: BURST runs started at once; prints throughput, failures, CPU and peak RSS."""
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True)
    await timed_run(stack, request, "warm-up")
    idle = tree_memory(stack.worker.pid).tree_rss
    stack.model.requests.clear()
    with RssSampler(stack.worker.pid) as sampler:
        cpu = CpuMeter(stack)
        began = time.perf_counter()
        handles = await asyncio.gather(*(start_run(stack, request, "burst") for _ in range(BURST)))
        results = await asyncio.gather(*(handle.result() for handle in handles), return_exceptions=True)
        elapsed = time.perf_counter() - began
        used = cpu.report()
    failures = [result for result in results if isinstance(result, BaseException)]
    peak = sampler.peak()
    print(f"{BURST} runs at once on {stack.worker.script.name}: all done in {elapsed:.1f} s = "
          f"{BURST / elapsed * 60:.0f} runs/min; "
          f"{len(failures)} failed; {len(stack.model.requests)} model calls; {used}")
    ok = not failures and peak.main_rss <= RSS_TARGET_MIB and peak.tree_pss <= RSS_TARGET_MIB
    print(f"worker memory: idle {idle:.0f} MiB RSS before; peak {peak.main_rss:.0f} MiB RSS for the worker process, "
          f"{peak.tree_pss:.0f} MiB PSS for its process tree (up to {peak.processes} processes with the "
          f"python_repl_tool sandboxes; their RSS sum peaked at {peak.tree_rss:.0f} MiB, counting pages shared with "
          f"the worker once per process); target <= {RSS_TARGET_MIB} MiB with no failed run: {verdict(ok)}",
          flush=True)
    for failure in failures[:3]:
        print(f"  failure: {failure!r}")


def sticky_cache_size(port: int) -> str:
    """The worker's own count of runs held in its cache, from its Prometheus endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    values = [float(m.group(1)) for m in re.finditer(r"^temporal_sticky_cache_size\S*\s+(\S+)$", text, re.M)]
    return f"{sum(values):.0f}" if values else "metric missing"


async def count(stack: Stack, query: str) -> int:
    return (await stack.client.count_workflows(query)).count


async def terminate_all(stack: Stack) -> float:
    """One batch operation terminates every running run; returns the seconds until none runs."""
    began = time.perf_counter()
    await stack.client.workflow_service.start_batch_operation(StartBatchOperationRequest(
        namespace=stack.client.namespace, visibility_query=RUNNING_QUERY, job_id=str(uuid.uuid4()),
        reason="benchmark over", max_operations_per_second=500,
        termination_operation=BatchOperationTermination()))
    while await count(stack, RUNNING_QUERY) and time.perf_counter() - began < 300:
        await asyncio.sleep(1.0)
    return time.perf_counter() - began


@dataclass(frozen=True)
class Paused:
    cache_size: int
    idle_mib: float
    waiting_mib: float
    peak_mib: float
    reach_seconds: float
    cached: str
    cpu: str
    terminate_seconds: float

    def line(self) -> str:
        per_run = (self.waiting_mib - self.idle_mib) * 1024 / PAUSED
        return (f"{PAUSED} paused, max_cached_workflows={self.cache_size}: all awaiting_review after "
                f"{self.reach_seconds:.0f} s ({self.cpu}); RSS idle {self.idle_mib:.0f} MiB -> waiting "
                f"{self.waiting_mib:.0f} MiB (peak {self.peak_mib:.0f} MiB, ~{per_run:.0f} KiB per paused run); "
                f"runs held in the worker's cache: {self.cached}; batch terminate {self.terminate_seconds:.0f} s")


async def paused(cache_size: int, server_args: list[str]) -> Paused:
    """Phase 2 on a fresh stack: PAUSED runs waiting for review, RSS after they settle, then terminate."""
    port = free_port()
    env = {"DEERFLOW_MAX_CACHED_WORKFLOWS": str(cache_size), "BENCH_METRICS_PORT": str(port)}
    async with bench_stack(model_latency=LATENCY, search_latency=LATENCY, worker_env=env, server_args=server_args,
                           worker_script=REPO / "bench/tuned_worker.py") as stack:
        await timed_run(stack, ResearchRequest(question=QUESTION, auto_accept_plan=True), "warm-up")
        idle = tree_memory(stack.worker.pid).tree_rss
        request = ResearchRequest(question=QUESTION)
        gate = asyncio.Semaphore(START_CONCURRENCY)

        async def start() -> None:
            async with gate:
                await start_run(stack, request, "paused")

        with RssSampler(stack.worker.pid) as sampler:
            cpu = CpuMeter(stack)
            began = time.perf_counter()
            await asyncio.gather(*(start() for _ in range(PAUSED)))
            while await count(stack, AWAITING_QUERY) < PAUSED:
                if time.perf_counter() - began > 900:
                    raise TimeoutError("the paused runs did not all reach awaiting_review in 15 minutes")
                await asyncio.sleep(1.0)
            reached, used = time.perf_counter() - began, cpu.report()
            await asyncio.sleep(SETTLE_SECONDS)
            settled = time.monotonic()
            await asyncio.sleep(SETTLE_SECONDS)
            waiting = statistics.median(sample.tree_rss for sample in sampler.window(settled))
            cached = sticky_cache_size(port)
        peak = sampler.peak().tree_rss
        row = Paused(cache_size, idle, waiting, peak, reached, cached, used, await terminate_all(stack))
    print(row.line(), flush=True)
    return row


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-sizes", default="1000,100",
                        help="max_cached_workflows values for phase 2 (1000 is the SDK default); '' skips it")
    parser.add_argument("--skip-burst", action="store_true", help="only phase 2")
    parser.add_argument("--tuned", action="store_true", help="phase 1 on bench/tuned_worker.py (BENCH_* knobs)")
    parser.add_argument("--burst", type=int, default=BURST)
    parser.add_argument("--paused", type=int, default=PAUSED)
    parser.add_argument("--sqlite-pragma", action="append", default=[], help="e.g. synchronous=NORMAL")
    args = parser.parse_args()
    globals().update(BURST=args.burst, PAUSED=args.paused)
    header("Concurrency")
    server_args = pragma_args(args.sqlite_pragma)
    print(f"dev server flags: {server_args or 'none'}")
    if not args.skip_burst:
        script = REPO / ("bench/tuned_worker.py" if args.tuned else "worker.py")
        async with bench_stack(model_latency=LATENCY, search_latency=LATENCY, server_args=server_args,
                               worker_script=script) as stack:
            await burst(stack)
    for size in [int(value) for value in args.cache_sizes.split(",") if value]:
        await paused(size, server_args)


if __name__ == "__main__":
    run_main(main())
