"""A starved worker: concurrent runs on one worker process at niceness 19 beside busy loops at 0.

Run from the repository root: ``.venv/bin/python bench/starved_worker.py`` (a few minutes);
``--tuner 0.8`` gives the worker the SDK's resource-based tuner (CPU target 0.8) in place of the
product's fixed activity slots per queue (``bench/tuned_worker.py``).

Why: issue #19. A low-priority worker on a busy machine gets a sliver of a core; its event loop
then misses heartbeats, and every call it holds is declared lost after 4 s. The figures are how
many attempts were lost (and why), whether every run completed, and how long they took. The busy
loops stop after ``--starve`` seconds, as load on a batch host comes and goes; the runs must all
complete afterwards. The fakes (model and search) run in this process, at its niceness.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from collections import Counter

from harness import REPO, bench_stack, header, run_main, start_run

from tests.support.history_checks import activity_events, retries_by_cause, start_attempts
from tests.support.runs import QUESTION
from workflows.contracts.research import ResearchRequest


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--busy", type=int, default=4, help="busy loops at niceness 0 (2 per core here)")
    parser.add_argument("--starve", type=float, default=120.0, help="seconds before the busy loops stop")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per fake model call")
    parser.add_argument("--tuner", type=float, default=None, help="resource-based tuner with this CPU target")
    parser.add_argument("--nice", type=int, default=19, help="the worker's niceness (0: equal priority)")
    args = parser.parse_args()
    env = {"BENCH_NICE": str(args.nice)}
    if args.tuner is not None:
        env["BENCH_RESOURCE_TUNER"] = str(args.tuner)
    header("starved worker")
    async with bench_stack(model_latency=args.latency, worker_env=env,
                           worker_script=REPO / "bench" / "tuned_worker.py") as stack:
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
        began = time.monotonic()
        try:
            request = ResearchRequest(question=QUESTION, auto_accept_plan=True)
            handles = [await start_run(stack, request, "starved") for _ in range(args.runs)]
            waiting = asyncio.gather(*(handle.result() for handle in handles), return_exceptions=True)
            done, _ = await asyncio.wait([waiting], timeout=args.starve)
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
        starved_for = time.monotonic() - began
        results = await waiting
        wall = time.monotonic() - began
        failed = [result for result in results if isinstance(result, BaseException)]
        lost: Counter[str] = Counter()
        highest = 1
        for handle in handles:
            history = await handle.fetch_history()
            lost += retries_by_cause(history)
            highest = max([highest, *(attempt for events in activity_events(history).values()
                                      for attempt in start_attempts(events))])
        print(f"{args.runs} runs, worker at nice {args.nice} beside {args.busy} busy loops for {starved_for:.0f} s, "
              f"tuner {'resource-based, CPU ' + str(args.tuner) if args.tuner is not None else 'none (fixed slots)'}: "
              f"{args.runs - len(failed)} completed, {len(failed)} failed "
              f"{sorted({str(error)[:120] for error in failed}) or ''}; "
              f"wall {wall:.0f} s; attempts lost {sum(lost.values())} {dict(lost) or ''}, highest attempt {highest}; "
              f"model calls {len(stack.model.requests)}; all done while starved: {bool(done)}")


if __name__ == "__main__":
    run_main(main())
