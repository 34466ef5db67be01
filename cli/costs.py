"""Reading what runs spent from Temporal, and ``starter.py costs``.

A completed run's usage is in its result (the close event only: one small read per run); a run still
going, or one that ended without a result (cancelled, terminated, timed out), answers the ``status``
query, which a worker answers for a closed run too by replaying it. A run that continued as new is
counted once, by its newest execution: the usage travels whole across continue-as-new.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from cli.spend import summarise, summary_tables, total_line
from cli.terminal import printable
from config.settings import Settings
from runtime import research_client
from runtime.front_door import CliError, connect
from runtime.run_memo import started_by
from workflows.models import WORKFLOW_TYPE, ResearchResult
from workflows.usage import Usage

READS_AT_ONCE = 8  # results and queries in flight while listing: the server's and the worker's share
# A status query waits for a worker; one that died a moment ago is still listed as polling, and a
# listing must not wait the server's whole query timeout for each of its runs.
QUERY_SECONDS = 5.0


async def run_usage(client: Client, execution: WorkflowExecution) -> Usage | None:
    """The run's usage as recorded (result, else status); None when neither can be read."""
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id, result_type=ResearchResult)
    if execution.status == WorkflowExecutionStatus.COMPLETED:
        try:
            return (await handle.result(follow_runs=False)).usage
        except (RPCError, ValueError):
            return None
    try:
        return (await asyncio.wait_for(research_client.status(handle), QUERY_SECONDS)).usage
    except (RPCError, ValueError, TimeoutError):  # no worker to answer, or a status this build cannot read
        return None


async def usages(client: Client, executions: Sequence[WorkflowExecution]) -> list[Usage | None]:
    """Each execution's usage (None for one that continued as new: its successor carries it), a few at a time."""
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def one(execution: WorkflowExecution) -> Usage | None:
        if execution.status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
            return None
        async with gate:
            return await run_usage(client, execution)

    return list(await asyncio.gather(*(one(execution) for execution in executions)))


def _table(rows: list[tuple[str, ...]]) -> str:
    """The first column left-aligned, the figures right-aligned."""
    cells = [tuple(printable(cell) for cell in row) for row in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(cells[0]))]
    return "\n".join("  ".join(cell.ljust(width) if column == 0 else cell.rjust(width)
                               for column, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
                     for row in cells)


async def costs(args: argparse.Namespace, settings: Settings) -> int:
    """Spend of the runs started in the last ``--since``, by model and by who started them."""
    client = await connect(settings, ensure_worker=False)
    since = datetime.now(UTC) - args.since
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND StartTime > '{since.isoformat(timespec='seconds')}'"
    try:
        executions = [execution async for execution in client.list_workflows(query)
                      if execution.status != WorkflowExecutionStatus.CONTINUED_AS_NEW]
    except RPCError as error:
        raise CliError(f"Could not list runs: {error.message}") from error
    starters = await asyncio.gather(*(started_by(execution) for execution in executions))
    summary = summarise(zip(starters, await usages(client, executions), strict=True))
    by_model, by_starter = summary_tables(summary)
    print(f"Runs started since {since:%Y-%m-%d %H:%M} UTC: {total_line(summary)}")
    if summary.by_model:
        print(f"\n{_table(by_model)}")
    if summary.by_starter:
        print(f"\n{_table(by_starter)}")
    return 0
