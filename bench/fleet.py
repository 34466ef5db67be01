"""Fleet: hundreds of research runs paused at their plan review, listed, then approved at once (issue #46).

Run from the repository root, niced on a shared machine, e.g.
``nice -n 10 .venv/bin/python bench/fleet.py --runs 100,300 --workers 2 --latency 0 --kill``.

Why it is measured this way: a durable workflow's promise is that a paused run costs almost nothing
while it waits, and that a person can act on many of them at once. So everything goes through the
doors people use: a dev server started with the embedded server's flags (``DevServer``: WAL, one
partition a queue), one or two ``worker.py`` processes (each with its Prometheus endpoint,
``DEERFLOW_METRICS_ADDRESS``, so it says how many runs its sticky cache holds),
``starter.py serve`` as its own process (the API the page uses), and the fake model and search
in this process at ``--latency`` seconds a call.

At each checkpoint of ``--runs`` (100, then 300: the same fleet grown) it records:
- the start rate: runs started through ``POST /api/runs``, ``START_AT_ONCE`` requests in flight;
- the time until every run awaits its plan review (the server's index says so);
- each worker's RSS, idle (after one warm-up run) and with every run paused, with its sticky cache
  size (``DEERFLOW_MAX_CACHED_WORKFLOWS``, the SDK's 1,000 unless ``--cache`` says otherwise) and
  how many runs the cache holds;
- the server database's bytes per paused run (the SQLite file and its WAL);
- how long ``starter.py list``, ``starter.py costs --since 7d`` (each a whole CLI command, served by
  the command server as a user's are once one runs, and cold, in a process of its own) and the
  page's list (``GET /api/runs``, 50 a page, unfiltered and filtered) take to answer.
At the last checkpoint: one ``POST /api/runs/review-all`` accepts every plan, and the bench
records how long the decisions took, the time until the last run's report is written (its close
time) and the throughput. With ``--kill`` a worker is SIGKILLed mid-storm (and, with one worker, a
new one started, as a supervisor would): every run must still complete exactly once (one
completion, one accepted review each), none lost or failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from concurrency import count, sticky_cache_size, terminate_all
from harness import REPO, BenchWorker, Stack, bench_stack, command_server_up, header, run_main, tree_memory
from temporalio.api.enums.v1 import EventType

from cli.command_client import SWITCH
from config.settings import load_settings
from runtime.embedded import process_polls
from tests.support.processes import free_port, wait_for_port
from tests.support.runs import QUESTION

START_AT_ONCE = 16  # POST /api/runs in flight, as a script starting a batch of runs would
SETTLE_SECONDS = 5.0
TIMES = 3  # each list is timed this many times; the median is reported
STORM_TIMEOUT = 3600.0


@dataclass
class Fleet:
    """The stack, its extra workers, the API server and the tag every run of this bench carries."""

    stack: Stack
    workers: list[BenchWorker]
    metrics_ports: list[int]
    api: str
    env: dict[str, str]
    tag: str

    def query(self, clause: str) -> str:
        return f"DeerFlowQuestion = '{self.tag}' AND {clause}"

    def db_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.stack.workdir.glob("temporal.db*"))


def worker_env(cache: int | None, port: int) -> dict[str, str]:
    env = {"DEERFLOW_METRICS_ADDRESS": f"127.0.0.1:{port}"}
    if cache is not None:
        env["DEERFLOW_MAX_CACHED_WORKFLOWS"] = str(cache)
    return env


@contextlib.asynccontextmanager
async def fleet(workers: int, latency: float, cache: int | None) -> AsyncIterator[Fleet]:
    """The stack with ``workers`` worker processes and ``starter.py serve``; all stopped on the way out."""
    ports = [free_port() for _ in range(workers)]
    async with bench_stack(model_latency=latency, search_latency=min(latency, 0.2),
                           worker_env=worker_env(cache, ports[0])) as stack:
        extra = [BenchWorker(stack.server.address, stack.workdir / f"worker{index}.log",
                             {**stack.worker.env, **worker_env(cache, port)}, stack.worker.script).start()
                 for index, port in enumerate(ports[1:], 2)]
        os.environ["TEMPORAL_ADDRESS"] = stack.server.address  # for the commands' handlers called here
        runtime_folder = stack.workdir / "run"  # the commands' own command server (cli/command_server.py)
        runtime_folder.mkdir(mode=0o700)
        env = {**os.environ, **{k: v for k, v in stack.worker.env.items() if k != "DEERFLOW_METRICS_ADDRESS"},
               "TEMPORAL_ADDRESS": stack.server.address, "XDG_RUNTIME_DIR": str(runtime_folder), SWITCH: "on"}
        api_port = free_port()
        with (stack.workdir / "api.log").open("ab") as log:
            api = subprocess.Popen([sys.executable, "starter.py", "serve", "--port", str(api_port)], cwd=REPO,
                                   env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for_port(api_port, timeout=90)
            yield Fleet(stack, [stack.worker, *extra], ports, f"http://127.0.0.1:{api_port}", env,
                        f"fleet{uuid.uuid4().hex[:8]}")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(api.pid, signal.SIGTERM)
            api.wait(timeout=30)
            for worker in extra:
                worker.stop()


async def start_runs(fleet: Fleet, http: httpx.AsyncClient, first: int, last: int) -> float:
    """Runs ``first`` to ``last - 1`` started through the API; returns the seconds that took."""
    gate = asyncio.Semaphore(START_AT_ONCE)

    async def one(number: int) -> None:
        async with gate:
            response = await http.post(f"{fleet.api}/api/runs", json={
                "question": f"{QUESTION} ({fleet.tag} {number})", "max_step_num": 1})
            response.raise_for_status()

    began = time.perf_counter()
    await asyncio.gather(*(one(number) for number in range(first, last)))
    return time.perf_counter() - began


async def until(fleet: Fleet, clause: str, expected: int, timeout: float) -> float:
    """Seconds until the index counts ``expected`` of the fleet's runs matching ``clause``."""
    began = time.perf_counter()
    while (found := await count(fleet.stack, fleet.query(clause))) < expected:
        if time.perf_counter() - began > timeout:
            raise TimeoutError(f"{found} of {expected} runs match {clause} after {timeout:.0f} s")
        await asyncio.sleep(0.5)
    return time.perf_counter() - began


async def median_seconds(action: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(TIMES):
        began = time.perf_counter()
        await action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


async def cli(fleet: Fleet, *args: str, cold: bool = False) -> str:
    """``starter.py ARGS`` as a user runs it: served by the command server (up since the first list),
    or ``cold``, in a process of its own (what the first command after a while pays)."""
    env = {**fleet.env, SWITCH: "off"} if cold else fleet.env
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "starter.py", *args], cwd=REPO, env=env,
                                   capture_output=True, text=True, timeout=300, check=False)
    if done.returncode:
        raise RuntimeError(f"starter.py {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


async def handler(fleet: Fleet, *argv: str) -> float:
    """The command's own work without a process's start-up: its handler called here (the bench's
    TEMPORAL_ADDRESS is the fleet's server), its output dropped. Returns the CPU seconds of this
    thread meanwhile (decoding, summing; not the server's answer, which the wall time includes)."""
    from starter import build_parser

    args = build_parser().parse_args(list(argv))
    began = time.thread_time()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert await args.handler(args, load_settings(fleet.env)) == 0
    return time.thread_time() - began


async def page_list(fleet: Fleet, http: httpx.AsyncClient, **params: str) -> int:
    response = await http.get(f"{fleet.api}/api/runs", params={"page_size": "50", **params})
    response.raise_for_status()
    return len(response.json()["runs"])


async def list_times(fleet: Fleet, http: httpx.AsyncClient) -> str:
    """Median seconds of each list: whole CLI commands (served, and cold: a process's start-up
    included) and the page's."""
    await cli(fleet, "list")  # starts the command server, if none runs yet
    await command_server_up(Path(fleet.env["XDG_RUNTIME_DIR"]))
    listed = await median_seconds(lambda: cli(fleet, "list"))
    filtered = await median_seconds(lambda: cli(fleet, "list", "--awaiting", "plan_feedback", "--question", fleet.tag))
    costs = await median_seconds(lambda: cli(fleet, "costs", "--since", "7d"))
    page = await median_seconds(lambda: page_list(fleet, http))
    page_filtered = await median_seconds(lambda: page_list(fleet, http, awaiting="plan_feedback", question=fleet.tag))
    empty = await median_seconds(lambda: cli(fleet, "list", "--question", "nosuchword"))
    cold_list = await median_seconds(lambda: cli(fleet, "list", cold=True))
    cold_costs = await median_seconds(lambda: cli(fleet, "costs", "--since", "7d", cold=True))
    own_list = await median_seconds(lambda: handler(fleet, "list"))
    cpu: list[float] = []
    own_costs = await median_seconds(lambda: _kept(cpu, handler(fleet, "costs", "--since", "7d")))
    return (f"served: list {listed:.2f} s (filtered {filtered:.2f} s; a list that matches nothing {empty:.2f} s), "
            f"costs --since 7d {costs:.2f} s; cold (each its own process): list {cold_list:.2f} s, costs "
            f"{cold_costs:.2f} s; the page's list "
            f"{page * 1000:.0f} ms (filtered {page_filtered * 1000:.0f} ms); the commands' own work (their "
            f"handlers in this process): list {own_list * 1000:.0f} ms, costs {own_costs * 1000:.0f} ms (its CPU "
            f"{statistics.median(cpu) * 1000:.0f} ms)")


async def _kept(into: list[float], seconds: Awaitable[float]) -> None:
    into.append(await seconds)


def memory(fleet: Fleet) -> str:
    rss = [f"{tree_memory(worker.pid).main_rss:.0f}" for worker in fleet.workers]
    cached = [sticky_cache_size(port) for port in fleet.metrics_ports]
    return f"RSS {' + '.join(rss)} MiB, sticky cache holds {' + '.join(cached)} runs"


async def checkpoint(fleet: Fleet, http: httpx.AsyncClient, started: int, total: int, db_before: int) -> None:
    """Grow the fleet to ``total`` paused runs and print its figures."""
    seconds = await start_runs(fleet, http, started, total)
    paused = await until(fleet, "DeerFlowAwaiting = 'plan_feedback' AND ExecutionStatus = 'Running'", total,
                         timeout=300 + total * 3)
    await asyncio.sleep(SETTLE_SECONDS)
    per_run = (fleet.db_bytes() - db_before) / total
    print(f"{total} runs: {total - started} started in {seconds:.1f} s = {(total - started) / seconds * 60:.0f} "
          f"runs/min through the API; all {total} awaiting review {paused:.0f} s after the last start; "
          f"paused: {memory(fleet)}; database {per_run / 1024:.1f} KiB per paused run", flush=True)
    print(f"  {total} runs: {await list_times(fleet, http)}", flush=True)


async def kill_mid_storm(fleet: Fleet, total: int) -> str:
    """SIGKILL the last worker once a quarter of the plans are accepted (the index no longer has those
    runs awaiting one); with no other worker left, start a new one, as a supervisor would."""
    await until(fleet, "ExecutionStatus = 'Running' AND DeerFlowAwaiting != 'plan_feedback'", total // 4,
                timeout=STORM_TIMEOUT)
    victim = fleet.workers[-1]
    os.killpg(victim.pid, signal.SIGKILL)
    accepted = total - await count(fleet.stack, fleet.query("DeerFlowAwaiting = 'plan_feedback'"))
    if len(fleet.workers) == 1:
        victim.start()
        return f"worker SIGKILLed with {accepted} plans accepted, a new one started at once"
    return f"worker {len(fleet.workers)} SIGKILLed with {accepted} plans accepted; the other carried on"


async def exactly_once(fleet: Fleet) -> tuple[int, int, list[str]]:
    """(completed, last close time as epoch seconds, runs that did not complete exactly once with one
    accepted review)."""
    wrong, completed, last = [], 0, 0.0
    async for execution in fleet.stack.client.list_workflows(fleet.query("ExecutionStatus != 'Running'")):
        history = await fleet.stack.client.get_workflow_handle(execution.id).fetch_history()
        kinds = [event.event_type for event in history.events]
        ends = kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
        reviews = kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
        completed += ends
        if ends != 1 or reviews != 1:
            wrong.append(f"{execution.id}: {ends} completions, {reviews} accepted reviews, {execution.status}")
        if execution.close_time:
            last = max(last, execution.close_time.timestamp())
    return completed, int(last), wrong


async def storm(fleet: Fleet, http: httpx.AsyncClient, total: int, kill: bool) -> None:
    """Accept every plan with one API call; the time until the last report, and whether every run
    completed exactly once (a worker SIGKILLed meanwhile with ``kill``)."""
    began, began_epoch = time.perf_counter(), time.time()
    killer = asyncio.create_task(kill_mid_storm(fleet, total)) if kill else None
    request = {"accept": True, "question": fleet.tag, "request_id": fleet.tag}
    response = await http.post(f"{fleet.api}/api/runs/review-all", json=request, timeout=STORM_TIMEOUT)
    decided = time.perf_counter() - began
    answer = response.json()
    again = ""
    if answer.get("failed") or answer.get("pending"):  # the same request again: what became of them
        second = (await http.post(f"{fleet.api}/api/runs/review-all", json=request, timeout=STORM_TIMEOUT)).json()
        again = (f"; review-all again: {second['decided']} decided, {second['skipped']} skipped, "
                 f"{second['pending']} pending, {second['failed']} failed")
    try:
        await until(fleet, "ExecutionStatus != 'Running'", total, timeout=STORM_TIMEOUT)
    finally:
        killed = await killer if killer else "no worker killed"
    completed, last, wrong = await exactly_once(fleet)
    seconds = last - began_epoch
    print(f"bulk accept of {total}: the call answered in {decided:.1f} s ({answer['decided']} decided, "
          f"{answer['skipped']} skipped, {answer['refused']} refused, {answer['pending']} pending, "
          f"{answer['failed']} failed{again}); the last "
          f"report {seconds:.0f} s after it = {total / seconds * 60:.0f} runs/min; {killed}; "
          f"{completed} of {total} completed, {len(wrong)} not exactly once", flush=True)
    for line in wrong[:5]:
        print(f"  {line}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="100,300", help="checkpoints: the fleet grows to each in turn")
    parser.add_argument("--workers", type=int, default=1, choices=(1, 2))
    parser.add_argument("--latency", type=float, default=0.0, help="the fake model's seconds a call")
    parser.add_argument("--cache", type=int, help="DEERFLOW_MAX_CACHED_WORKFLOWS (default: the product's, 1000)")
    parser.add_argument("--kill", action="store_true", help="SIGKILL a worker mid-storm")
    args = parser.parse_args()
    checkpoints = [int(value) for value in args.runs.split(",")]
    header(f"Fleet: {args.runs} runs, {args.workers} worker(s), model {args.latency:g} s a call")
    print(f"load average at start: {os.getloadavg()[0]:.1f}; this bench's niceness {os.nice(0)}", flush=True)
    async with fleet(args.workers, args.latency, args.cache) as fleet_, httpx.AsyncClient(timeout=120) as http:
        for worker in fleet_.workers[1:]:
            await until_polls(fleet_, worker)
        warm = await http.post(f"{fleet_.api}/api/runs", json={"question": QUESTION, "auto_accept_plan": True,
                                                               "max_step_num": 1})
        await fleet_.stack.client.get_workflow_handle(warm.json()["id"]).result()
        await asyncio.sleep(SETTLE_SECONDS)
        print(f"idle (after one warm-up run): {memory(fleet_)}; sticky cache size "
              f"{args.cache or 'the product default, 1000'}", flush=True)
        db_before, started = fleet_.db_bytes(), 0
        for total in checkpoints:
            await checkpoint(fleet_, http, started, total, db_before)
            started = total
        await storm(fleet_, http, started, args.kill)
        print(f"  after the storm, {started} completed: {await list_times(fleet_, http)}", flush=True)
        print(f"load average at the end: {' '.join(f'{load:.1f}' for load in os.getloadavg())}", flush=True)
        await terminate_all(fleet_.stack)


async def until_polls(fleet: Fleet, worker: BenchWorker) -> None:
    """Until ``worker`` (one started beside the stack's own) polls."""
    deadline = time.monotonic() + 90
    while not await process_polls(fleet.stack.client, worker.pid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker {worker.pid} did not start")
        await asyncio.sleep(0.1)


if __name__ == "__main__":
    run_main(main())
