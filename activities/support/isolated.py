"""Running CPU-heavy work on hostile input (page and PDF extraction) in a killable child process.

Why a child process per job, and how:

* **A thread cannot be stopped.** trafilatura and pypdf have inputs that make them run for
  minutes; a timed-out thread keeps burning CPU and holds a slot of the default executor, which
  the blob store and other activities share. A process can be killed: the parent sends SIGKILL
  the moment a job is over its wall-clock budget, and the kernel enforces ``RLIMIT_CPU`` (and
  ``RLIMIT_AS`` for memory) in the child even if the parent were stuck.
* **Fresh children from a fork server.** ``multiprocessing``'s ``forkserver`` context starts one
  clean server process (fork+exec, so nothing of the worker's threads comes along) that imports
  the extraction libraries once (:data:`PRELOAD`); each job is a fork of it, ~25 ms (bench/
  README.md) instead of the 2.5 s an import of trafilatura, lxml and pypdf costs. A killed
  child takes nothing down with it, unlike a worker of a ``ProcessPoolExecutor``, whose death
  breaks the whole pool; and a child's memory is returned to the system when it exits.
* **A child's answer is JSON, capped** (:data:`MAX_MESSAGE_BYTES`), never unpickled.
* **Children run at lower priority** (``nice`` +10), so a burst of heavy extraction slows other
  extractions, not the worker's event loop, its other activities or the blob store.
* **Bounded concurrency of its own.** At most ``DEERFLOW_EXTRACT_MAX_CONCURRENCY`` children run
  at once per worker (each under ``DEERFLOW_EXTRACT_MAX_MEMORY_MB`` of address space); their
  blocking pipe waits use a private thread pool of that size, never the default executor. The
  default (8) is above the crawl concurrency on purpose: CPU fairness comes from nice and the
  budgets, so a small page should not queue behind heavy ones for a slot.

A job is a generator function (module level, so it pickles by reference) called as
``target(payload, *args)``; each value it yields is sent to the parent as JSON (tuples come back
as lists), and the parent gives each one its own deadline. So a job can hand back a cheap
result first and an expensive one later, and the caller keeps the cheap one if the expensive
one runs over.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import math
import multiprocessing
import os
import resource
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # this module is imported by the fork server and its children: no settings there
    from config.settings import Settings

# Imported once by the fork server, so each child starts with them loaded (the last one also
# runs a small extraction, for what trafilatura loads only on first use).
PRELOAD = ["activities.web.page_text", "activities.documents.extract", "pypdf", "hosting.extract_warmup"]
CHILD_NICENESS = 10
# A child's messages are JSON, not pickle: a child that hostile input took over must not be
# able to run code in the worker by what it sends back, nor send it more than this.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


class _Popen(popen_forkserver.Popen):
    """The fork server's launcher, minus the parent's main module.

    multiprocessing makes every child run the parent's main script again (``worker.py``, a
    bench, pytest's runner) so that objects defined in it unpickle; in 3.11 its fork server never
    preloads that script, so each child would import the worker's whole dependency tree first,
    ~300 ms a job. Jobs here are module-level functions of importable modules, so the child
    needs only the parent's ``sys.path`` and working directory. This is the standard library's
    ``_launch`` with the main-module entries left out of the preparation data.
    """

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        for key in ("init_main_from_path", "init_main_from_name"):
            prep_data.pop(key, None)
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        parent_w = os.dup(w)  # the child watches it to notice the parent's death
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _Process(context.ForkServerProcess):
    _Popen = staticmethod(_Popen)


_executors: dict[int, ThreadPoolExecutor] = {}
_slots: dict[int, threading.BoundedSemaphore] = {}

Job = Callable[..., Iterator[Any]]


@dataclass(frozen=True)
class Limits:
    """What the kernel enforces on one child (CPU seconds, address space), and how many children
    the worker runs at once (the slots the parent waits for)."""

    cpu_seconds: float
    memory_bytes: int
    max_concurrency: int

    @classmethod
    def for_budget(cls, wall_seconds: float, settings: Settings) -> Limits:
        """CPU a second above the wall budget (the parent kills first); memory and slots from settings."""
        return cls(cpu_seconds=wall_seconds + 1, memory_bytes=settings.extract_max_memory_mb * 1024 * 1024,
                   max_concurrency=settings.extract_max_concurrency)


@dataclass
class Outcome:
    """The values the job sent in time, and why it stopped early, if it did."""

    values: list[Any] = field(default_factory=list)
    timed_out_after: float | None = None  # the deadline (seconds) of the value that did not come
    error: str | None = None  # the job raised, or the child died (e.g. killed by RLIMIT_CPU/AS)


def start_fork_server(settings: Settings) -> None:
    """Start the fork server now, and wait until it forks (its imports and warm-up take 1-3 s),
    so that the first page's extraction does not pay for it (the worker calls it at start)."""
    run_blocking(_ready, b"", (), [60.0], Limits.for_budget(60.0, settings))


def _ready(payload: bytes) -> Iterator[bool]:
    yield True


async def run_isolated(
    target: Job, payload: bytes | bytearray, args: tuple[Any, ...], deadlines: Sequence[float], limits: Limits
) -> Outcome:
    """Run ``target`` in a fresh child, taking one value per deadline; the child never outlives it.

    The wait runs in a private pool of ``DEERFLOW_EXTRACT_MAX_CONCURRENCY`` threads, which only
    sleep on the pipe (the CPU work is the child's), so the default executor stays free. If the
    caller is cancelled (the activity was), the child is killed at once, not at its deadline.
    """
    started: list[BaseProcess] = []
    job = functools.partial(run_blocking, target, payload, args, deadlines, limits, started.append)
    try:
        return await asyncio.get_running_loop().run_in_executor(_executor(limits.max_concurrency), job)
    except asyncio.CancelledError:
        for process in started:
            process.kill()  # the waiting thread then sees the pipe close, and reaps it
        raise


def _executor(limit: int) -> ThreadPoolExecutor:
    if limit not in _executors:
        _executors[limit] = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="isolated")
    return _executors[limit]


def run_blocking(
    target: Job,
    payload: bytes | bytearray,
    args: tuple[Any, ...],
    deadlines: Sequence[float],
    limits: Limits,
    on_start: Callable[[BaseProcess], None] | None = None,
) -> Outcome:
    """:func:`run_isolated` for synchronous callers: start the child, collect, kill and reap it.

    Waits first for one of the ``DEERFLOW_EXTRACT_MAX_CONCURRENCY`` slots shared by every caller
    in the process, so that many children never run at once. Each deadline counts from the
    previous value (the first from the child's start).
    """
    with _slot(limits.max_concurrency):
        return _run(target, payload, args, deadlines, limits, on_start)


def _slot(limit: int) -> threading.BoundedSemaphore:
    return _slots.setdefault(limit, threading.BoundedSemaphore(limit))


def _run(
    target: Job,
    payload: bytes | bytearray,
    args: tuple[Any, ...],
    deadlines: Sequence[float],
    limits: Limits,
    on_start: Callable[[BaseProcess], None] | None,
) -> Outcome:
    conn, child_conn = _CONTEXT.Pipe()
    process = _Process(target=_child_main, args=(child_conn, limits, target, args), daemon=True)
    outcome = Outcome()
    try:
        process.start()
        if on_start is not None:
            on_start(process)
        child_conn.close()
        conn.send_bytes(payload)
        for deadline in deadlines:
            if not conn.poll(deadline):
                outcome.timed_out_after = deadline
                break
            kind, value = json.loads(conn.recv_bytes(MAX_MESSAGE_BYTES))
            if kind == "error":
                outcome.error = str(value)
                break
            outcome.values.append(value)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        process.join(timeout=1)
        outcome.error = f"the extraction process ended without an answer (exit code {process.exitcode})"
    except (OSError, ValueError) as exc:  # a message too long, not JSON, or not [kind, value]
        outcome.error = f"the extraction process sent a malformed answer ({type(exc).__name__})"
    finally:
        if process.pid is not None and process.exitcode is None:
            process.kill()
        if process.pid is not None:
            process.join()
        conn.close()
        child_conn.close()
    return outcome


def _child_main(conn: Connection, limits: Limits, target: Job, args: tuple[Any, ...]) -> None:
    """Runs in the child: apply the limits, read the payload, send each yielded value."""
    cpu = math.ceil(limits.cpu_seconds)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at soft, SIGKILL at hard
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    os.nice(CHILD_NICENESS)
    payload = conn.recv_bytes()
    try:
        for value in target(payload, *args):
            _send(conn, "value", value)
    except MemoryError:
        _send(conn, "error", "MemoryError: over the extraction memory limit")
    except Exception as exc:  # hostile input can make any library raise anything
        _send(conn, "error", f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def _send(conn: Connection, kind: str, value: Any) -> None:
    conn.send_bytes(json.dumps([kind, value]).encode())
