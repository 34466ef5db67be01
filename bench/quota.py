"""Fleet-wide model quota: 2 worker processes capped at R model requests per second together.

Run from the repository root: ``.venv/bin/python bench/quota.py`` (about a minute; ``--rate``,
``--runs``, ``--steps`` to vary it).

Why it is measured this way: the cap is Temporal's task-queue rate limit on the model queue
(``LLM_REQUESTS_PER_SECOND``), which the server applies to every worker polling that queue, so two
real ``worker.py`` processes share one dev server and one fake model. The fake runs in this process
and stamps each request as it arrives, as the provider would count it. Enough runs start at once
that they would send far more than R per second uncapped (each run's next call follows its last
within about 0.3 s); the rate is read over the middle 80 % of the requests, where demand exceeds
the cap (see ``tests/support/quota_drill.py``). Target: within 10 % of R, every run completed.
"""

from __future__ import annotations

import argparse
import time

from harness import REPO, BenchWorker, bench_stack, header, run_main, verdict

from offline.providers import offline_env
from tests.support.quota_drill import measured_rate, run_many

TOLERANCE = 0.10


async def main(rate: float, runs: int, steps: int) -> None:
    header(f"bench/quota.py: {runs} runs, 2 workers, LLM_REQUESTS_PER_SECOND={rate:g}")
    worker_env = {"LLM_REQUESTS_PER_SECOND": str(rate)}
    async with bench_stack(model_latency=0.2, worker_env=worker_env) as stack:
        env = {"DEERFLOW_HOME": str(stack.workdir / "home"), **worker_env, **offline_env(stack.model, stack.search)}
        second = BenchWorker(stack.server.address, stack.workdir / "worker-2.log", env, REPO / "worker.py").start()
        try:
            await stack.until_worker_polls()
            stack.model.arrivals.clear()  # the warm-up's probe, if any
            began = time.monotonic()
            results = await run_many(stack.client, runs, "quota", max_steps=steps)
            wall = time.monotonic() - began
        finally:
            second.stop()
    measured = measured_rate(stack.model.arrivals)
    completed = sum(1 for result in results if result.report)
    ratio = measured.per_second / rate
    print(f"requests {measured.requests} in {wall:.1f} s; middle window {measured.window_requests} requests in "
          f"{measured.window_seconds:.1f} s = {measured.per_second:.2f}/s; measured/R = {ratio:.3f}; "
          f"busiest second {measured.busiest_second}; runs completed {completed}/{runs}")
    print(f"within {TOLERANCE:.0%} of R and all runs completed: "
          f"{verdict(abs(ratio - 1) <= TOLERANCE and completed == runs)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=4.0, help="the cap R, model requests per second")
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2, help="max_step_num of each run")
    args = parser.parse_args()
    run_main(main(args.rate, args.runs, args.steps))
