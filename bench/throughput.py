"""Throughput with 1, 2 and 3 worker processes on one dev server (issue #12).

Run from the repository root: ``.venv/bin/python bench/throughput.py`` (about 3 minutes on 2 cores;
``--runs`` and ``--workers`` change the defaults, 40 runs and 1,2,3).

Why it is measured this way: Temporal lets a team add worker processes, on any machine, to run
more research at once. With fixed fake latencies (model 0.5 s per call, search 0.05 s), a worker's
throughput is bounded by its per-queue concurrency limits (workflows/calls/queues.py): with
``LLM_MAX_CONCURRENCY`` at 4, one process runs at most 4 model calls at a time. Each extra process
adds its own slots, so runs per minute should grow with the processes until the machine's 2 cores
(or the dev server) set the pace. Every configuration runs the same batch of runs (3 steps,
auto-accepted), started together, on a fresh dev server; the figure is runs completed per minute of
wall time from the first start to the last result, in one session.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from harness import REPO, BenchWorker, bench_stack, header, run_main, start_run

from tests.support.runs import QUESTION
from workflows.contracts.research import ResearchRequest

MODEL_LATENCY, SEARCH_LATENCY = 0.5, 0.05
WORKER_ENV = {"LLM_MAX_CONCURRENCY": "4", "DEERFLOW_MAX_CACHED_WORKFLOWS": "1000"}


async def measure(workers: int, runs: int) -> float:
    """Runs per minute for ``runs`` runs started together on ``workers`` worker processes."""
    async with bench_stack(MODEL_LATENCY, SEARCH_LATENCY, worker_env=WORKER_ENV) as stack:
        extra = [BenchWorker(stack.server.address, stack.workdir / f"worker-{index}.log", stack.worker.env,
                             REPO / "worker.py").start() for index in range(1, workers)]
        try:
            await asyncio.sleep(8 if extra else 0)  # the extra processes import and poll
            request = ResearchRequest(question=QUESTION, auto_accept_plan=True)
            began = time.perf_counter()
            handles = await asyncio.gather(*(start_run(stack, request, f"tput-{workers}") for _ in range(runs)))
            results = await asyncio.gather(*(handle.result() for handle in handles))
            elapsed = time.perf_counter() - began
        finally:
            for worker in extra:
                worker.stop()
    assert all(result.report for result in results)
    return runs / elapsed * 60


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--workers", default="1,2,3", help="comma-separated process counts")
    args = parser.parse_args()
    header(f"throughput: {args.runs} runs, model {MODEL_LATENCY} s, LLM_MAX_CONCURRENCY 4 per process")
    baseline = None
    print("| worker processes | runs/min | against 1 |")
    print("|---|---|---|")
    for workers in (int(value) for value in args.workers.split(",")):
        rate = await measure(workers, args.runs)
        baseline = baseline or rate
        print(f"| {workers} | {rate:.1f} | {rate / baseline:.2f} |", flush=True)


if __name__ == "__main__":
    run_main(main())
