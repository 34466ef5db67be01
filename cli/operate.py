"""``watch``, ``list``, ``cancel`` and ``down``: operating runs (and the embedded server) once started."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError

from cli.actor import cli_actor
from cli.costs import usages
from cli.render import ended_label, state_label
from cli.runs import _describe, _status
from cli.spend import cost_cell
from cli.terminal import printable
from config.settings import Settings
from runtime import research_client
from runtime.embedded import EmbeddedStack
from runtime.front_door import CliError, connect, revive_worker
from runtime.search_attributes import missing_search_attributes
from workflows.models import WORKFLOW_TYPE, Awaiting, Phase
from workflows.visibility import AWAITING, PHASE


async def watch_run(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here: rich and the live view are this command's alone (list, cancel and down start without them).
    from cli.watch import WatchStats, watch

    client = await connect(settings)  # the status query needs a worker
    stats = WatchStats()
    final = await watch(client.get_workflow_handle(args.id), live=sys.stdout.isatty() and not args.plain,
                        out=sys.stdout, stats=stats, on_no_worker=lambda: revive_worker(client, settings))
    if args.stats:
        print(stats.summary(), file=sys.stderr)
    return 1 if final.phase is Phase.FAILED else 0


async def list_runs(args: argparse.Namespace, settings: Settings) -> int:
    """Runs with how they stand (running, or how they ended), their phase, what they spent and their age.

    ``--awaiting-review`` filters by the DeerFlowAwaiting attribute. Where the namespace lacks our
    search attributes, the phase of each running run is read with the status query instead
    (slower, same answer). A row whose query fails says why; it never fails the list. The spend is
    the run's recorded usage (cli/costs.py): ``-`` where it cannot be read.
    """
    client = await connect(settings, ensure_worker=False)
    now = datetime.now(UTC)
    query = f"WorkflowType = '{WORKFLOW_TYPE}'"
    if args.running or args.awaiting_review:
        query += " AND ExecutionStatus = 'Running'"
    indexed = await _has_search_attributes(client)
    if args.awaiting_review and indexed:
        query += f" AND {AWAITING.name} = '{Awaiting.PLAN_FEEDBACK.value}'"
    rows: list[tuple[str, str, str, str]] = []
    listed: list[WorkflowExecution] = []
    try:
        async for execution in client.list_workflows(query, limit=args.limit):
            phase = execution.typed_search_attributes.get(PHASE)
            if phase is None and execution.status == WorkflowExecutionStatus.RUNNING:
                try:
                    current = await _status(client.get_workflow_handle(execution.id))
                except CliError as error:
                    phase = f"? {error}"
                else:
                    phase = current.phase.value + (f" ({current.awaiting.value})" if current.awaiting else "")
                    if args.awaiting_review and current.awaiting is not Awaiting.PLAN_FEEDBACK:
                        continue
            age = str(now - execution.start_time).split(".")[0]
            state = state_label(execution.status)
            rows.append((execution.id, state, phase or "-", age))
            listed.append(execution)
    except RPCError as error:
        raise CliError(f"Could not list runs: {error.message}") from error
    spent = [cost_cell(usage) for usage in await usages(client, listed)]
    print(_table(("ID", "STATUS", "PHASE", "SPENT", "AGE"),
                 [(run, state, phase, cost, age) for (run, state, phase, age), cost in zip(rows, spent, strict=True)]))
    return 0


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Columns as wide as their content (the last one right-aligned: ages line up)."""
    cells = [header, *[tuple(printable(cell) for cell in row) for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) if column == len(header) - 1 else cell.ljust(width)
                  for column, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
        for row in cells
    )


async def _has_search_attributes(client: Client) -> bool:
    try:
        return not await missing_search_attributes(client)
    except (RPCError, ValueError):
        return False


async def cancel(args: argparse.Namespace, settings: Settings) -> int:
    client = await connect(settings, ensure_worker=False)
    handle = client.get_workflow_handle(args.id)
    ended = ended_label((await _describe(handle)).status)
    if ended is not None:
        raise CliError(f"Run {args.id} has already ended ({ended}); there is nothing to cancel.")
    await research_client.cancel(handle, cli_actor(args))
    print(f"Cancellation requested for {args.id}")
    return 0


async def down(args: argparse.Namespace, settings: Settings) -> int:
    stopped = EmbeddedStack(settings).stop()
    print(f"Stopped: {', '.join(stopped)}" if stopped else "Nothing to stop.")
    return 0
