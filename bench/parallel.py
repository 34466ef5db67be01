"""Parallel speedup: 4 independent research steps with ``parallel_steps`` on against off.

Run from the repository root: ``.venv/bin/python bench/parallel.py`` (about 2 minutes).

Why it is measured this way: ``max_step_num=5`` makes the planner write 4 research steps that
depend on nothing plus 1 processing step that depends on all of them, so with ``parallel_steps``
the 4 researchers may run at once. With the model at 1 s per call and search at 0.3 s, each
research step is model -> search -> model (about 2.3 s). The step phase is read from the run's
own progress events (first ``step_started`` to the last research ``step_done``, workflow time);
the whole run is timed from start to result. The two modes alternate, so both see the same load.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime

from harness import Stack, bench_stack, header, median, run_main, timed_run, verdict

from tests.support.runs import QUESTION
from workflows.contracts.plan import StepType
from workflows.contracts.research import ResearchRequest
from workflows.contracts.status import RunStatus

MODEL_LATENCY = 1.0
SEARCH_LATENCY = 0.3
TARGET = 3.0


@dataclass(frozen=True)
class Timing:
    step_phase: float  # first step_started -> last research step_done
    wall: float  # start -> result


async def timed(stack: Stack, parallel: bool) -> Timing:
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=5, parallel_steps=parallel)
    handle, result, wall = await timed_run(stack, request, "parallel" if parallel else "sequential")
    status = await handle.query("status", result_type=RunStatus)
    research = {step.index for step in status.steps if step.step_type is StepType.RESEARCH}
    if result.plan is None or len(research) != 4:
        raise RuntimeError(f"expected a plan with 4 research steps, got {status.steps}")
    started = [datetime.fromisoformat(e.at) for e in status.events if e.kind == "step_started"]
    done = [datetime.fromisoformat(e.at) for e in status.events if e.kind == "step_done" and e.step_index in research]
    return Timing((max(done) - min(started)).total_seconds(), wall)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    header("Parallel speedup")
    sequential: list[Timing] = []
    parallel: list[Timing] = []
    async with bench_stack() as stack:
        await timed(stack, parallel=True)  # warm-up at zero latency
        stack.set_latency(MODEL_LATENCY, SEARCH_LATENCY)
        for _ in range(args.repeats):
            sequential.append(await timed(stack, parallel=False))
            parallel.append(await timed(stack, parallel=True))
    for number, (off, on) in enumerate(zip(sequential, parallel, strict=True), 1):
        print(f"pair {number}: step phase {off.step_phase:.2f} s -> {on.step_phase:.2f} s "
              f"({off.step_phase / on.step_phase:.2f}x); whole run {off.wall:.2f} s -> {on.wall:.2f} s "
              f"({off.wall / on.wall:.2f}x)")
    step_speedup = median(off.step_phase / on.step_phase for off, on in zip(sequential, parallel, strict=True))
    run_speedup = median(off.wall / on.wall for off, on in zip(sequential, parallel, strict=True))
    print(f"median step phase (4 research steps): off {median(t.step_phase for t in sequential):.2f} s, "
          f"on {median(t.step_phase for t in parallel):.2f} s")
    print(f"median whole run: off {median(t.wall for t in sequential):.2f} s, "
          f"on {median(t.wall for t in parallel):.2f} s")
    print(f"step-phase speedup: {step_speedup:.2f}x (target >= {TARGET}x: {verdict(step_speedup >= TARGET)})")
    print(f"whole-run speedup: {run_speedup:.2f}x (target >= {TARGET}x: {verdict(run_speedup >= TARGET)}; "
          "the coordinator, planner, processing step and reporter stay sequential)")


if __name__ == "__main__":
    run_main(main())
