"""Replay time: how long the worker needs to rebuild a finished default run from its history.

Run from the repository root: ``.venv/bin/python bench/replay_time.py`` (a few seconds; no servers).

Why it matters: a worker that restarts, or evicts a run from its cache, replays the run's whole
history before it can take the next step, and ``starter.py replay`` does the same to check a
code change. This replays ``tests/histories/accepted_plan.json`` (a default run: 3 steps, plan
accepted by a person) with the product's converter 21 times; the first replay pays for sandbox
set-up and imports, so it is reported on its own as "cold", and the median is over the other 20.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness import REPO, header, median, ms, run_main, verdict
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from config.settings import load_settings
from runtime.converter import data_converter
from workflows.research.workflow import DeepResearchWorkflow

TARGET_SECONDS = 0.2
WARM_REPLAYS = 20


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=Path, default=REPO / "tests/histories/accepted_plan.json")
    args = parser.parse_args()
    header("Replay time")
    history = WorkflowHistory.from_json("bench-replay", args.history.read_text(encoding="utf-8"))
    replayer = Replayer(workflows=[DeepResearchWorkflow], data_converter=data_converter(load_settings()))
    times = []
    for _ in range(WARM_REPLAYS + 1):
        began = time.perf_counter()
        result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
        times.append(time.perf_counter() - began)
        if result.replay_failure is not None:
            raise RuntimeError(f"replay failed: {result.replay_failure}")
    cold, warm = times[0], times[1:]
    print(f"history: {args.history.relative_to(REPO) if args.history.is_relative_to(REPO) else args.history} "
          f"({len(history.events)} events)")
    print(f"cold (first) replay: {ms(cold)}")
    print(f"warm replays: median {ms(median(warm))}, min {ms(min(warm))}, max {ms(max(warm))} over {len(warm)}")
    print(f"median warm replay {ms(median(warm))} (target <= {ms(TARGET_SECONDS)}: "
          f"{verdict(median(warm) <= TARGET_SECONDS)})")


if __name__ == "__main__":
    run_main(main())
