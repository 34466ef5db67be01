"""``starter.py replay --since 7d [--query "…"]``: every closed run the server keeps, replayed against
this code before a deploy; each nondeterministic run named with the event where it diverged.

Runs are listed from the server's visibility a page at a time, and their histories fetched and
resolved (runtime/history_export.py: blob references, encryption) ``--concurrency`` at a time into
a queue as long, so a fleet of any size holds a bounded number of histories, while one replayer
(runtime/replay.py: the workers' runner and converter) replays them one after another. Only our
workflow types are listed: the research workflow is registered as the dynamic one, and would
otherwise "replay" a stranger's history and report it. A run whose history cannot be read (a blob
gone, no keys) is reported apart: it proves nothing either way.

Exit code: 1 when any run diverged, else 2 when any could not be read, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.client import Client, WorkflowExecution, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from cli.terminal import printable
from config.settings import Settings
from runtime.front_door import CliError, connect
from runtime.history_export import self_contained
from runtime.replay import diverged, replayer
from runtime.visibility_query import all_of, instant, one_of, quoted
from workflows.catalog import WORKFLOW_TYPES

PAGE_SIZE = 100
PROGRESS_EVERY = 200


@dataclass(frozen=True)
class Unread:
    """A listed run whose history could not be read, and why."""

    workflow_id: str
    run_id: str
    reason: str


@dataclass
class FleetReport:
    replayed: int = 0
    diverged: int = 0
    unread: int = 0

    @property
    def exit_code(self) -> int:
        return 1 if self.diverged else 2 if self.unread else 0


def fleet_query(since: datetime | None, query: str | None, include_open: bool) -> str:
    """The visibility query: our workflow types, closed (and open, with ``include_open``) since ``since``,
    and the operator's own ``query``."""
    closed = ("ExecutionStatus != 'Running'", f"CloseTime > {quoted(instant(since))}" if since else "")
    status = (f"ExecutionStatus = 'Running' OR ({all_of(*closed)})",) if include_open else closed
    return all_of(one_of("WorkflowType", WORKFLOW_TYPES), *status, query or "")


async def replay_fleet(args: argparse.Namespace, settings: Settings) -> int:
    client = await connect(settings, ensure_worker=False)
    since = datetime.now(UTC) - args.since if args.since else None
    query = fleet_query(since, args.query, args.open)
    print(f"Replaying every run where {query}", file=sys.stderr)
    replaying, searching = replayer(client.data_converter), replayer(client.data_converter)
    report = FleetReport()
    async with replaying.workflow_replay_iterator(_readable(_histories(client, query, args.concurrency),
                                                            report)) as results:
        async for result in results:
            report.replayed += 1
            if result.replay_failure is not None:
                report.diverged += 1
                where = await diverged(searching, result.history, result.replay_failure)
                _say(f"NONDETERMINISTIC {_run_of(result.history)}: diverges at {where.event}: "
                             f"{where.message}")
            if report.replayed % PROGRESS_EVERY == 0:
                print(f"… {report.replayed} runs replayed", file=sys.stderr)
    print(f"Replayed {report.replayed} runs: {report.replayed - report.diverged} deterministic, "
          f"{report.diverged} nondeterministic; {report.unread} could not be read.")
    return report.exit_code


def _say(line: str) -> None:
    print(printable(line), flush=True)


def _run_of(history: WorkflowHistory) -> str:
    started = history.events[0].workflow_execution_started_event_attributes if history.events else None
    return f"{history.workflow_id} (run {started.original_execution_run_id})" if started else history.workflow_id


async def _readable(items: AsyncIterator[WorkflowHistory | Unread],
                    report: FleetReport) -> AsyncIterator[WorkflowHistory]:
    """The histories to replay; the unreadable ones reported as they come."""
    async for item in items:
        if isinstance(item, Unread):
            report.unread += 1
            _say(f"UNREADABLE {item.workflow_id} (run {item.run_id}): {item.reason}")
        else:
            yield item


class _End:
    """The producer is done; ``error`` if the listing failed."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


async def _histories(client: Client, query: str, at_once: int) -> AsyncIterator[WorkflowHistory | Unread]:
    """Each listed run's resolved history (or why not), at most ``at_once`` fetched and ``at_once`` waiting."""
    queue: asyncio.Queue[WorkflowHistory | Unread | _End] = asyncio.Queue(maxsize=at_once)
    gate = asyncio.Semaphore(at_once)

    async def one(execution: WorkflowExecution) -> None:
        try:
            item = await _history(client, execution)
            if item is not None:
                await queue.put(item)
        finally:
            gate.release()

    async def produce() -> None:
        try:
            async with asyncio.TaskGroup() as group:
                async for execution in client.list_workflows(query, page_size=PAGE_SIZE):
                    await gate.acquire()
                    group.create_task(one(execution))
        except Exception as error:  # a query the server refuses, a connection lost: the command says so
            await queue.put(_End(error))
            return
        await queue.put(_End())

    producer = asyncio.create_task(produce())
    try:
        while not isinstance(item := await queue.get(), _End):
            yield item
    finally:
        producer.cancel()
    if item.error is not None:
        message = item.error.message if isinstance(item.error, RPCError) else str(item.error)
        raise CliError(f"Could not list the runs to replay: {message}") from item.error


async def _history(client: Client, execution: WorkflowExecution) -> WorkflowHistory | Unread | None:
    """The run's history, its references resolved; None if it was deleted since it was listed."""
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    try:
        return await self_contained(await handle.fetch_history(), client.data_converter)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return None
        return Unread(execution.id, execution.run_id, error.message)
    except Exception as error:  # a blob gone, a key missing, a payload the converter refuses
        return Unread(execution.id, execution.run_id, f"{type(error).__name__}: {str(error)[:300]}")
