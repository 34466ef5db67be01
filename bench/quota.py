"""Fleet-wide model quota: 2 worker processes capped at R model requests per second together.

Run from the repository root: ``.venv/bin/python bench/quota.py`` (2-4 minutes; ``--rate``,
``--runs``, ``--steps`` to vary it).

Why it is measured this way: the cap is Temporal's task-queue rate limit on the model queue
(``LLM_REQUESTS_PER_SECOND``), which the server applies to every worker polling that queue, so two
real ``worker.py`` processes share one dev server and one fake model. The fake runs in this process
and stamps each request as it arrives, as the provider would count it. Enough runs start at once
that they would send far more than R per second uncapped (each run's next call follows its last
within about 0.3 s); the rate is read over the middle 80 % of the requests, where demand exceeds
the cap (see ``tests/support/quota_drill.py``). The same runs go first uncapped, to show the demand:
a machine too loaded to send more than R per second uncapped cannot test the cap, and says so.
Target: within 10 % of R, every run completed.
"""

from __future__ import annotations

import argparse
import time

from harness import REPO, BenchWorker, bench_stack, header, run_main, verdict

from offline.providers import offline_env
from tests.support.quota_drill import Rate, chat_starts_of, measured_rate, rate_while_waiting, run_many

TOLERANCE = 0.10


def partition_args(partitions: int | None) -> list[str]:
    """The dev server's flags for ``partitions`` partitions per task queue (None: the product's one,
    ``runtime.embedded.DEV_SERVER_QUEUE_FLAGS``; 4 is the server's own default)."""
    if partitions is None:
        return []
    return [arg for kind in ("Read", "Write")
            for arg in ("--dynamic-config-value", f"matching.numTaskqueue{kind}Partitions={partitions}")]


async def measure(rate: float | None, runs: int, steps: int, partitions: int | None) -> tuple[Rate, int, float]:
    """The rate the fake model saw with the fleet capped at ``rate`` (None: uncapped), runs completed, wall."""
    worker_env = {"LLM_REQUESTS_PER_SECOND": str(rate)} if rate else {}
    async with bench_stack(model_latency=0.2, worker_env=worker_env, server_args=partition_args(partitions)) as stack:
        env = {"DEERFLOW_HOME": str(stack.workdir / "home"), **worker_env, **offline_env(stack.model, stack.search)}
        second = BenchWorker(stack.server.address, stack.workdir / "worker-2.log", env, REPO / "worker.py").start()
        try:
            await stack.until_worker_polls()
            stack.model.arrivals.clear()  # the warm-up's probe, if any
            began = time.monotonic()
            results = await run_many(stack.client, runs, "quota", max_steps=steps)
            wall = time.monotonic() - began
            starts = await chat_starts_of(stack.client, "quota")
        finally:
            second.stop()
    dispatched = measured_rate([start.started for start in starts])
    gaps, seconds = rate_while_waiting([start.started for start in starts],
                                       [(start.scheduled, start.started) for start in starts if start.attempt == 1])
    waited = gaps / seconds if seconds else 0.0
    print(f"  the server started {dispatched.requests} calls: middle window {dispatched.per_second:.2f}/s, "
          f"busiest 10 s {dispatched.busiest_span}; while calls waited {gaps} in {seconds:.1f} s = {waited:.2f}/s; "
          f"attempts {sum(start.attempt for start in starts)}", flush=True)
    return measured_rate(stack.model.arrivals), sum(1 for result in results if result.report), wall


def describe(label: str, rate: Rate, completed: int, runs: int, wall: float) -> None:
    print(f"{label}: {rate.requests} requests in {wall:.1f} s; middle window {rate.window_requests} requests in "
          f"{rate.window_seconds:.1f} s = {rate.per_second:.2f}/s; busiest second {rate.busiest_second}; "
          f"busiest {rate.span:g} s {rate.busiest_span} ({rate.busiest_per_second:.2f}/s); "
          f"runs completed {completed}/{runs}", flush=True)


async def main(rate: float, runs: int, steps: int, partitions: int | None) -> None:
    header(f"bench/quota.py: {runs} runs, 2 workers, LLM_REQUESTS_PER_SECOND={rate:g}, "
           f"{partitions or 1} partition(s) per queue")
    demand, completed, wall = await measure(None, runs, steps, partitions)
    describe("uncapped (the demand)", demand, completed, runs, wall)
    capped, completed, wall = await measure(rate, runs, steps, partitions)
    describe(f"capped at {rate:g}/s", capped, completed, runs, wall)
    ratio = capped.per_second / rate
    print(f"measured/R = {ratio:.3f}; demand/R = {demand.per_second / rate:.2f}")
    if demand.per_second < rate * (1 + TOLERANCE):
        print("NOT SATURATED: uncapped, this machine sent less than R per second; rerun when it is quieter")
        return
    print(f"within {TOLERANCE:.0%} of R and all runs completed: "
          f"{verdict(abs(ratio - 1) <= TOLERANCE and completed == runs)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=4.0, help="the cap R, model requests per second")
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2, help="max_step_num of each run")
    parser.add_argument("--partitions", type=int,
                        help="task queue partitions on the dev server (default: 1, the product's)")
    args = parser.parse_args()
    run_main(main(args.rate, args.runs, args.steps, args.partitions))
