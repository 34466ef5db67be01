"""Shared machinery for the benchmarks: one dev server, one real worker process, fakes in this process.

Why this shape: the worker runs as its own process (``worker.py``, exactly as deployed), so its
RSS is its own and a crash of the bench cannot hide inside it. The fake model and fake Tavily
run *here*, in the bench, so every request the worker sends is counted in
``FakeModelServer.requests`` and their latency can be changed between runs without restarting
anything. Everything binds to loopback, and :func:`bench_stack` stops every process it started,
even when the benchmark fails half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benches run as plain scripts

from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.converter import DataConverter

from config.settings import load_settings
from offline.loopback_http import FakeServerHandler, send_body, serve_in_thread, shut_down
from offline.model_server import FakeModelServer
from offline.providers import offline_env, without_provider_settings
from offline.search_index import Document, SearchIndex
from offline.search_server import FakeSearchServer
from runtime.converter import data_converter
from runtime.embedded import process_polls
from runtime.shutdown import exit_now
from tests.support.processes import DevServer, WorkerProcess
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult

REPO = Path(__file__).resolve().parent.parent
MACHINE_NOTE = "2 cores, shared with other work (load average often 3-6)"
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
STARTED = EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
COMPLETED = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
CRAWL_LOOPBACK = {"DEERFLOW_CRAWL_ALLOW_HOSTS": "127.0.0.1"}  # worker setting: crawl the pages served here
# Env vars the bench shares with the worker: the client's converter must match the worker's store.
SHARED_SETTINGS = ("DEERFLOW_HOME", "DEERFLOW_PAYLOAD_STORE", "DEERFLOW_PAYLOAD_THRESHOLD_BYTES", "DEERFLOW_SUBTREES")


# ---------------------------------------------------------------- processes


class BenchWorker(WorkerProcess):
    """``WorkerProcess`` that can start a different script (``bench/tuned_worker.py``) the same way.

    It caches bytecode as a deployed worker has it: a shell's ``PYTHONDONTWRITEBYTECODE`` is
    dropped and the cache goes to ``PYTHONPYCACHEPREFIX`` (set by :func:`bench_stack` to its own
    directory, so no tree is written to). Without it, each run's workflow sandbox would compile
    ``workflows/research/workflow.py`` from source again (about 10 ms at every run's head), which neither the
    image (``compileall``) nor a plain checkout (Python writes ``__pycache__`` on first import) does.
    """

    def __init__(self, address: str, log_path: Path, env: dict[str, str], script: Path, niceness: int = 0) -> None:
        super().__init__(address, log_path, env, niceness=niceness)
        self.script = script

    def start(self) -> BenchWorker:
        inherited = {k: v for k, v in without_provider_settings(os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
        env = {**inherited, "TEMPORAL_ADDRESS": self.address, **self.env}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command(self.script), cwd=REPO, env=env,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, "the worker is not running"
        return self.process.pid


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc (the field after the command name is the state, then ppid)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(entry.path, "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def _status_kib(pid: int, path: str, key: str) -> int:
    """A ``Key:  N kB`` line of /proc/<pid>/status or smaps_rollup; 0 if the process is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    return 0


@dataclass(frozen=True)
class Memory:
    """One sample of a process tree, in MiB. PSS splits shared pages (the interpreter, libraries)
    between the processes that map them, so unlike RSS it does not count them once per process."""

    main_rss: float
    tree_rss: float
    tree_pss: float
    processes: int


def tree_memory(pid: int) -> Memory:
    """Memory of ``pid`` and all its descendants (the sandbox's child interpreters included)."""
    children = _children()
    pids, stack = [], [pid]
    while stack:
        current = stack.pop()
        pids.append(current)
        stack.extend(children.get(current, []))
    rss = [_status_kib(p, "status", "VmRSS:") for p in pids]
    pss = sum(_status_kib(p, "smaps_rollup", "Pss:") for p in pids)
    return Memory(rss[0] / 1024, sum(rss) / 1024, pss / 1024, len(pids))


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` so far, user + system, including its reaped children (sandbox runs)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def children_cpu(pid: int) -> float:
    """CPU time of ``pid``'s live children (and theirs that ended). Children started from a thread (a
    worker's extraction fork server) are listed under that thread's task, not the main one's."""
    total = 0.0
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):  # gone since listed
            for child in children.read_text().split():
                total += cpu_seconds(int(child))
    return total


class RssSampler:
    """Samples a process tree's memory every ``interval`` s on a thread (the event loop may be busy)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, Memory]] = []  # (monotonic time, sample)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), tree_memory(self.pid)))
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def window(self, since: float = 0.0) -> list[Memory]:
        return [sample for at, sample in self.samples if at >= since]

    def peak(self, since: float = 0.0) -> Memory:
        """The highest of each figure over the samples taken at or after ``since`` (not one sample)."""
        window = self.window(since) or [Memory(0, 0, 0, 0)]
        return Memory(max(m.main_rss for m in window), max(m.tree_rss for m in window),
                      max(m.tree_pss for m in window), max(m.processes for m in window))


# ---------------------------------------------------------------- the stack


@dataclass
class Stack:
    """A running dev server, worker process and fakes, with a client using the product's converter."""

    workdir: Path
    model: FakeModelServer
    search: FakeSearchServer
    server: DevServer
    worker: BenchWorker
    client: Client
    started: list[str] = field(default_factory=list)

    def set_latency(self, model: float, search: float) -> None:
        self.model.latency_seconds = model
        self.search.latency_seconds = search

    async def until_worker_polls(self, timeout: float = 90) -> None:
        """Until this very worker process polls (not a dead one the server still lists)."""
        deadline = time.monotonic() + timeout
        while not await process_polls(self.client, self.worker.pid):
            if self.worker.process is None or self.worker.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start:\n{self.worker_log_tail()}")
            await asyncio.sleep(0.05)

    async def restart_worker(self) -> None:
        """Stop the worker and start a new process, returning as soon as that process polls: what
        a run started right after a deploy or a crash meets (its warm-up may still be running)."""
        self.worker.stop()
        self.worker.start()
        await self.until_worker_polls()

    def worker_log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.worker.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@contextlib.asynccontextmanager
async def bench_stack(
    model_latency: float = 0.0,
    search_latency: float = 0.0,
    corpus: Path | None = None,
    worker_env: dict[str, str] | None = None,
    server_args: list[str] | None = None,
    worker_script: Path = REPO / "worker.py",
    worker_niceness: int = 0,
) -> AsyncIterator[Stack]:
    """Start fakes, a dev server on a fresh database and one worker; stop them all on the way out.

    ``worker_env`` entries named in :data:`SHARED_SETTINGS` go into the bench client's settings
    too, so the client reads the same payload store as the worker writes. ``worker_niceness`` is
    added to this process's niceness for the worker (and the workers that replace it).
    """
    with tempfile.TemporaryDirectory(prefix="deerflow-bench-") as tmp:
        workdir = Path(tmp)
        home = workdir / "home"
        env = {"DEERFLOW_HOME": str(home), "PYTHONPYCACHEPREFIX": str(workdir / "pycache"), **(worker_env or {})}
        client_settings = load_settings({**os.environ, **{k: v for k, v in env.items() if k in SHARED_SETTINGS}})
        with contextlib.ExitStack() as stop:
            model = FakeModelServer(latency_seconds=model_latency).start()
            stop.callback(model.stop)
            search = FakeSearchServer(corpus_path=corpus, latency_seconds=search_latency).start()
            stop.callback(search.stop)
            server = DevServer(workdir / "temporal.db", extra_args=server_args).start()
            stop.callback(server.stop)
            env.update(offline_env(model, search))
            worker = BenchWorker(server.address, workdir / "worker.log", env, worker_script, worker_niceness).start()
            stop.callback(worker.stop)
            client = await connect_when_healthy(server.address, data_converter(client_settings))
            stack = Stack(workdir, model, search, server, worker, client)
            await stack.until_worker_polls()
            try:
                yield stack
            except BaseException:
                print(f"--- worker log tail ---\n{stack.worker_log_tail()}", file=sys.stderr)
                raise


async def connect_when_healthy(address: str, converter: DataConverter, timeout: float = 60) -> Client:
    """A client of a dev server that has just started. Its port opens before its frontend is
    healthy, and on a loaded machine a client connecting in between is refused ("Frontend is not
    healthy yet"), so this retries until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await Client.connect(address, data_converter=converter)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def pragma_args(pragmas: Iterable[str]) -> list[str]:
    """``temporal server start-dev`` flags for SQLite pragmas, e.g. ``synchronous=NORMAL``."""
    return [arg for pragma in pragmas for arg in ("--sqlite-pragma", pragma)]


async def start_run(stack: Stack, request: ResearchRequest, prefix: str) -> WorkflowHandle[object, ResearchResult]:
    """Start one research run with a unique ID."""
    workflow_id = f"{prefix}-{time.time_ns()}"
    stack.started.append(workflow_id)
    return await stack.client.start_workflow(WORKFLOW_TYPE, request, id=workflow_id, task_queue=TASK_QUEUE,
                                             result_type=ResearchResult)


async def timed_run(stack: Stack, request: ResearchRequest, prefix: str
                    ) -> tuple[WorkflowHandle[object, ResearchResult], ResearchResult, float]:
    """Start a run and wait for its result; returns (handle, result, wall seconds start -> result)."""
    began = time.perf_counter()
    handle = await start_run(stack, request, prefix)
    result = await handle.result()
    return handle, result, time.perf_counter() - began


# ---------------------------------------------------------------- loopback pages for the crawler


class _PageHandler(FakeServerHandler):
    server: _PageServer

    def do_GET(self) -> None:
        body = self.server.pages.get(self.path)
        send_body(self, 200 if body is not None else 404, body or b"", {"Content-Type": "text/html; charset=utf-8"})

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a bench prints figures, not access logs."""


class _PageServer(ThreadingHTTPServer):
    pages: dict[str, bytes]


@contextlib.contextmanager
def serve_pages(pages: dict[str, bytes]) -> Iterator[str]:
    """Serve ``pages`` (path -> HTML) on 127.0.0.1 for the real crawler; yields the base URL."""
    server = _PageServer(("127.0.0.1", 0), _PageHandler)
    server.pages = pages
    thread = serve_in_thread(server, "bench-pages")
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        shut_down(server, thread)


def html_page(title: str, size: int) -> bytes:
    """An article-like page of about ``size`` bytes: paragraphs of distinct, readable sentences."""
    paragraphs, length, number = [], 0, 0
    while length < size:
        number += 1
        text = (f"<p>Paragraph {number} of {title}: solid-state batteries replace the liquid electrolyte "
                f"with a solid one, which may raise energy density and safety for electric vehicles; "
                f"sample {number * 7919 % 10007} of the measurements is discussed here.</p>\n")
        paragraphs.append(text)
        length += len(text)
    return (f"<!doctype html><html><head><title>{title}</title></head><body><article><h1>{title}</h1>\n"
            + "".join(paragraphs) + "</article></body></html>").encode()


def page_index(base_url: str, paths: Iterable[str]) -> SearchIndex:
    """A search index whose every document is a loopback page, all relevant to :data:`tests.support.runs.QUESTION`.

    Put it in ``stack.search.index``; the worker needs :data:`CRAWL_LOOPBACK` to read the pages.
    """
    return SearchIndex([Document(title=f"Solid-state batteries for electric vehicles, part {number}",
                                 url=f"{base_url}{page}",
                                 content="Prospects of solid-state batteries for electric vehicles: energy density, "
                                         f"safety, costs and manufacturing (source {number}).",
                                 published_date="2025-01-01") for number, page in enumerate(paths, 1)])


# ---------------------------------------------------------------- reading histories


def event_time(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


@dataclass(frozen=True)
class Span:
    """One activity's last attempt: its type and when it started and completed (server time)."""

    activity_type: str
    scheduled: datetime
    started: datetime
    completed: datetime

    @property
    def seconds(self) -> float:
        return (self.completed - self.started).total_seconds()


def activity_spans(history: WorkflowHistory) -> list[Span]:
    """Every completed activity of a history, in order of start."""
    scheduled: dict[int, HistoryEvent] = {}
    started: dict[int, HistoryEvent] = {}
    spans = []
    for event in history.events:
        if event.event_type == SCHEDULED:
            scheduled[event.event_id] = event
        elif event.event_type == STARTED:
            started[event.activity_task_started_event_attributes.scheduled_event_id] = event
        elif event.event_type == COMPLETED:
            scheduled_id = event.activity_task_completed_event_attributes.scheduled_event_id
            spans.append(Span(
                scheduled[scheduled_id].activity_task_scheduled_event_attributes.activity_type.name,
                event_time(scheduled[scheduled_id]), event_time(started[scheduled_id]), event_time(event)))
    return sorted(spans, key=lambda span: span.started)


def overlap_groups(spans: Iterable[Span]) -> list[list[Span]]:
    """Spans merged into groups that overlap in time (concurrent tool calls of one turn)."""
    groups: list[list[Span]] = []
    end: datetime | None = None
    for span in sorted(spans, key=lambda span: span.started):
        if groups and end is not None and span.started < end:
            groups[-1].append(span)
            end = max(end, span.completed)
        else:
            groups.append([span])
            end = span.completed
    return groups


def count_activities(history: WorkflowHistory, activity_type: str) -> tuple[int, int]:
    """(scheduled, completed) activities of one type: a failed one is scheduled but never completed."""
    scheduled = sum(1 for event in history.events if event.event_type == SCHEDULED
                    and event.activity_task_scheduled_event_attributes.activity_type.name == activity_type)
    return scheduled, sum(1 for span in activity_spans(history) if span.activity_type == activity_type)


def is_reference(payload: Payload) -> bool:
    """A claim-check reference: the payload's bytes live in the external store, not in history."""
    return len(payload.external_payloads) > 0


# ---------------------------------------------------------------- small formatting helpers


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def kib(size: int) -> str:
    return f"{size / 1024:.1f} KiB"


def verdict(met: bool) -> str:
    return "MET" if met else "MISSED"


def header(title: str) -> None:
    print(f"== {title} ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {MACHINE_NOTE})", flush=True)


def run_main(main: Coroutine[Any, Any, None]) -> NoReturn:
    """Run a bench's ``main`` and leave without interpreter finalization (see ``runtime/shutdown.py``).

    Every process the bench started is stopped inside ``main`` (``bench_stack``), so skipping
    finalization loses nothing; an exception is printed and exits 1, a missed target does not.
    ``SystemExit`` (argparse's ``--help`` or a bad flag, parsed inside ``main``) exits with its own
    code and its own message, not a traceback.
    """
    try:
        asyncio.run(main)
    except SystemExit as leaving:
        if isinstance(leaving.code, str):
            print(leaving.code, file=sys.stderr)
        exit_now(leaving.code if isinstance(leaving.code, int) else 0 if leaving.code is None else 1)
    except BaseException:
        traceback.print_exc()
        exit_now(1)
    exit_now(0)


async def command_server_up(runtime_folder: Path, timeout: float = 60) -> None:
    """Until the command server a served command started under ``runtime_folder`` (its
    ``XDG_RUNTIME_DIR``) listens (cli/command_server.py logs "serving" when it does)."""
    deadline = time.monotonic() + timeout
    while not any("serving" in log.read_text() for log in runtime_folder.glob("deerflow-cli-*/*.log")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no command server under {runtime_folder} within {timeout} s")
        await asyncio.sleep(0.1)
