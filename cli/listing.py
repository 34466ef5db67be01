"""``starter.py list``: research runs a page at a time, filtered by the server's visibility index.

Each row is read from the listing alone (runtime/run_listing.py): how the run stands or ended, its
phase, what it has spent and who started it. Only a run from before runs kept their spend in their
memo has it read on its own (its result, or its status query), and only where the namespace lacks
our search attributes is a running run's phase asked of it: a list of new runs makes one request
to the server, however many runs there are (issue #46).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from cli.costs import usages
from cli.filters import missing_for, run_filter
from cli.render import state_label
from cli.runs import _status
from cli.spend import cost_cell
from cli.terminal import printable
from config.settings import Settings
from runtime.front_door import CliError, connect
from runtime.run_listing import ListedRun, list_page
from runtime.run_memo import indexes_questions
from runtime.visibility_query import QueryError
from workflows.research.visibility import PHASE

HEADER = ("ID", "STATUS", "PHASE", "SPENT", "AGE", "STARTED BY")


async def list_runs(args: argparse.Namespace, settings: Settings) -> int:
    """Runs with how they stand (running, or how they ended), their phase, spend, age and starter, a
    page of ``--limit`` at a time (``--page`` goes on), newest first."""
    wanted = run_filter(args)
    client = await connect(settings, ensure_worker=False)
    missing = await missing_for(client, wanted)
    indexed = indexes_questions(client)
    try:
        page = await list_page(client, wanted.visibility_query(question_indexed=indexed), args.limit, args.page,
                               keep=lambda run: wanted.keeps_question(run.question, indexed))
    except QueryError as error:
        raise CliError(f"--page: {error}") from None
    except RPCError as error:
        raise CliError(f"Could not list runs: {error.message}") from error
    now = datetime.now(UTC)
    rows = [(run.id, state_label(run.execution.status), await _phase(client, run, PHASE in missing),
             str(now - run.execution.start_time).split(".")[0], str(run.started_by or "-")) for run in page.runs]
    spent = [cost_cell(usage) for usage in await usages(client, [run.execution for run in page.runs])]
    print(_table(HEADER, [(run, state, phase, cost, age, starter)
                          for (run, state, phase, age, starter), cost in zip(rows, spent, strict=True)]))
    if page.next_page:
        print(f"More runs: the same command with --page {page.next_page}", file=sys.stderr)
    return 0


async def _phase(client: Client, run: ListedRun, unindexed: bool) -> str:
    """The run's phase as indexed; where the namespace keeps no phases, a running run's own answer."""
    if run.phase is not None or not unindexed or run.execution.status != WorkflowExecutionStatus.RUNNING:
        return run.phase or "-"
    try:
        current = await _status(client.get_workflow_handle(run.id))
    except CliError as error:
        return f"? {error}"
    return current.phase.value + (f" ({current.awaiting.value})" if current.awaiting else "")


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Columns as wide as their content, the age right-aligned (ages line up)."""
    cells = [header, *[tuple(printable(cell) for cell in row) for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    age = header.index("AGE")
    return "\n".join(
        "  ".join(cell.rjust(width) if column == age else cell.ljust(width)
                  for column, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
        for row in cells
    )
