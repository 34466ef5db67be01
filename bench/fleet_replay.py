"""Fleet replay: how long ``starter.py replay --since`` takes per run before a deploy, and where the time goes.

Run from the repository root: ``.venv/bin/python bench/fleet_replay.py`` (about 4 minutes on 2 cores;
``--runs`` changes the fleet, 40 runs by default).

Why it matters: the README's deploy step replays every closed run the server keeps (a week's, in CI)
against the new build before it rolls out, so its time grows with the fleet. The command lists runs
a page at a time and fetches their histories (blob references resolved, runtime/history_export.py)
``--concurrency`` at a time, while one replayer replays them one after another: the SDK's
``Replayer`` takes one history at a time, and the workflow code it runs holds the interpreter lock,
so replays in one process cannot overlap usefully. This bench researches a fleet of default runs
(3 steps, plan accepted, fake model and search at no latency) on a dev server, then measures:

1. the command as an operator runs it (a fresh ``starter.py`` process, imports included), at
   ``--concurrency`` 1 and 4: wall seconds, and milliseconds per run;
2. its two halves in this process: fetching every history alone (at 1, 4 and 8 at a time), and
   replaying the fetched histories alone (warm, one replayer).

If the replay half dominates, more fetch concurrency buys nothing and the time per run is the
replay's: a figure for how long the CI step takes per thousand runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator

from harness import REPO, Stack, bench_stack, header, ms, run_main, start_run
from temporalio.client import Client, WorkflowHistory

from runtime.history_export import self_contained
from runtime.replay import replayer
from tests.support.runs import QUESTION
from workflows.contracts.research import WORKFLOW_TYPE, ResearchRequest

COMMAND_CONCURRENCY = (1, 4)
FETCH_CONCURRENCY = (1, 4, 8)
STARTED_AT_ONCE = 8  # runs researched at a time while the fleet is built


async def build_fleet(stack: Stack, runs: int) -> None:
    """``runs`` default runs, researched to their reports, ``STARTED_AT_ONCE`` at a time."""
    request = ResearchRequest(question=QUESTION, auto_accept_plan=True)
    gate = asyncio.Semaphore(STARTED_AT_ONCE)

    async def one() -> None:
        async with gate:
            await (await start_run(stack, request, "fleet")).result()

    await asyncio.gather(*(one() for _ in range(runs)))


def time_command(stack: Stack, concurrency: int, runs: int) -> float:
    """Wall seconds of ``starter.py replay --since 1d`` in a fresh process; checks it replayed them all."""
    env = {**os.environ, "TEMPORAL_ADDRESS": stack.server.address, "DEERFLOW_HOME": str(stack.workdir / "home")}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, str(REPO / "starter.py"), "replay", "--since", "1d", "--concurrency",
                           str(concurrency)], env=env, capture_output=True, text=True, timeout=1800, check=False)
    took = time.perf_counter() - began
    said = f"Replayed {runs} runs: {runs} deterministic, 0 nondeterministic; 0 could not be read."
    if done.returncode != 0 or said not in done.stdout:
        raise RuntimeError(f"replay --since said (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return took


async def fetch_all(client: Client, ids: list[str], at_once: int) -> list[WorkflowHistory]:
    """Every run's self-contained history, ``at_once`` at a time, as the command fetches them."""
    gate = asyncio.Semaphore(at_once)

    async def one(workflow_id: str) -> WorkflowHistory:
        async with gate:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            return await self_contained(history, client.data_converter)

    return list(await asyncio.gather(*(one(workflow_id) for workflow_id in ids)))


async def replay_all(client: Client, histories: list[WorkflowHistory]) -> float:
    """Wall seconds to replay ``histories`` one after another in one replayer (after one warm-up)."""
    replaying = replayer(client.data_converter)
    await replaying.replay_workflow(histories[0], raise_on_replay_failure=True)  # imports, sandbox set-up

    async def each() -> AsyncIterator[WorkflowHistory]:
        for history in histories:
            yield history

    began = time.perf_counter()
    async with replaying.workflow_replay_iterator(each()) as results:
        async for result in results:
            if result.replay_failure is not None:
                raise RuntimeError(f"{result.history.workflow_id} did not replay: {result.replay_failure}")
    return time.perf_counter() - began


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    header("Fleet replay")
    async with bench_stack() as stack:
        began = time.perf_counter()
        await build_fleet(stack, args.runs)
        print(f"fleet: {args.runs} runs ({WORKFLOW_TYPE}, 3 steps each) researched in "
              f"{time.perf_counter() - began:.0f} s", flush=True)
        stack.worker.stop()  # the command needs no worker; its CPU is the replay's alone
        for concurrency in COMMAND_CONCURRENCY:
            took = time_command(stack, concurrency, args.runs)
            print(f"starter.py replay --since 1d --concurrency {concurrency}: {took:.1f} s, "
                  f"{ms(took / args.runs)} per run", flush=True)
        histories: list[WorkflowHistory] = []
        for at_once in FETCH_CONCURRENCY:
            began = time.perf_counter()
            histories = await fetch_all(stack.client, stack.started, at_once)
            took = time.perf_counter() - began
            print(f"fetch alone, {at_once} at a time: {took:.1f} s, {ms(took / args.runs)} per run", flush=True)
        events = sum(len(history.events) for history in histories) / len(histories)
        took = await replay_all(stack.client, histories)
        print(f"replay alone ({events:.0f} events a run): {took:.1f} s, {ms(took / args.runs)} per run; "
              f"{1000 * took / args.runs / 60:.1f} min per 1,000 runs", flush=True)


if __name__ == "__main__":
    run_main(main())
