"""Reading what runs spent from Temporal, and ``starter.py costs``.

A completed run's usage is in its result (the close event only: one small read per run); a run still
going, or one that ended without a result (cancelled, terminated, timed out), answers the ``status``
query, which a worker answers for a closed run too by replaying it. A run that continued as new is
counted once, by its newest execution: the usage travels whole across continue-as-new.

The content flows that call the model (workflows/content/flow_usage.py: prose, the report judge, slides, the
podcast's script, the prompt enhancer) are counted the same way, their ``usage`` query standing in
for the status: every model call in the ``deerflow_llm_cost_microusd`` metric is in ``costs``, under
the run or flow that made it (issue #48 item 5).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError

from cli.filters import missing_for, run_filter
from cli.render import state_label
from cli.spend import RESEARCH, summarise, summary_tables, total_line
from cli.terminal import printable
from config.settings import Settings
from runtime import research_client
from runtime.front_door import CliError, connect
from runtime.memo_listing import memo_fields, memo_rows
from runtime.run_listing import RunFilter
from runtime.run_memo import QUESTION, STARTED_BY, actor_in, indexes_questions, question_in, usage_in
from runtime.visibility_query import all_of, instant, one_of, quoted
from workflows.content.flow_usage import COUNTED_FLOWS, USAGE_QUERY
from workflows.contracts.research import WORKFLOW_TYPE
from workflows.contracts.usage import Usage
from workflows.research.visibility import USAGE_MEMO

READS_AT_ONCE = 8  # results and queries in flight while listing: the server's and the worker's share
# A status query waits for a worker; one that died a moment ago is still listed as polling, and a
# listing must not wait the server's whole query timeout for each of its runs.
QUERY_SECONDS = 5.0
# Runs whose memo holds their spend (workflows/research/run_state.py publish_usage, issue #46): it is written at
# completion and at a cancel, and while a run runs at each phase and step, so a running run's spend
# leaves out the step in progress. A run failed, terminated or timed out may have spent after its last
# memo, and is read as before, as is a run from before runs kept it (no memo).
MEMO_SAYS_ALL = {WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.CANCELED, WorkflowExecutionStatus.RUNNING}


class Counted(Protocol):
    """A run as a listing has it, enough to read what it spent: a ``WorkflowExecution`` (``list``'s
    page) or a ``MemoRow`` (``costs``: runtime/memo_listing.py)."""

    @property
    def id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def workflow_type(self) -> str: ...
    @property
    def status(self) -> WorkflowExecutionStatus | None: ...


def kind_of(run: Counted) -> str:
    """``research``, or the content flow's name (``prose writer``, ``slide composer``, …)."""
    return COUNTED_FLOWS.get(run.workflow_type, RESEARCH)


async def run_usage(client: Client, run: Counted) -> Usage | None:
    """The run's or flow's usage as recorded (result, else its status or usage query); None when
    neither can be read."""
    handle = client.get_workflow_handle(run.id, run_id=run.run_id)
    try:
        if run.status == WorkflowExecutionStatus.COMPLETED:  # each result type carries its usage
            result = await handle.result(follow_runs=False)
            return Usage.model_validate(result.get("usage") or {}) if isinstance(result, dict) else None
        if run.workflow_type in COUNTED_FLOWS:
            return await asyncio.wait_for(handle.query(USAGE_QUERY, result_type=Usage), QUERY_SECONDS)
        return (await asyncio.wait_for(research_client.status(handle), QUERY_SECONDS)).usage
    except (RPCError, WorkflowQueryFailedError, ValueError, TimeoutError):  # no worker to answer, or a record
        return None  # this build cannot read


async def usages(client: Client, executions: Sequence[WorkflowExecution]) -> list[Usage | None]:
    """Each listed execution's usage (``spent``), its memo as the listing brought it (one converter for
    them all: runtime/memo_listing.py)."""
    memos = await memo_fields(client, [execution.raw_info for execution in executions], (USAGE_MEMO,))
    return await spent(client, executions, [usage_in(memo.get(USAGE_MEMO)) for memo in memos])


async def spent(client: Client, runs: Sequence[Counted], memos: Sequence[Usage | None]) -> list[Usage | None]:
    """Each run's usage (None for one that continued as new: its successor carries it): ``memos``, each
    run's usage memo as the listing brought it, where that is its last word (``MEMO_SAYS_ALL``); else
    read, a few at a time."""
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def read(run: Counted) -> Usage | None:
        async with gate:
            return await run_usage(client, run)

    found: list[Usage | None] = [None] * len(runs)
    unread: dict[int, Counted] = {}
    for index, (run, memo) in enumerate(zip(runs, memos, strict=True)):
        if run.status in MEMO_SAYS_ALL and memo is not None:
            found[index] = memo
        elif run.status != WorkflowExecutionStatus.CONTINUED_AS_NEW:
            unread[index] = run
    for index, usage in zip(unread, await asyncio.gather(*(read(run) for run in unread.values())), strict=True):
        found[index] = usage
    return found


def _table(rows: list[tuple[str, ...]]) -> str:
    """The first column left-aligned, the figures right-aligned."""
    cells = [tuple(printable(cell) for cell in row) for row in rows]
    widths = [max(len(row[column]) for row in cells) for column in range(len(cells[0]))]
    return "\n".join("  ".join(cell.ljust(width) if column == 0 else cell.rjust(width)
                               for column, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
                     for row in cells)


async def costs(args: argparse.Namespace, settings: Settings) -> int:
    """Spend of the runs started in the last ``--since``, by model and by who started them. The other
    filters (phase, starter, question, age, query) narrow it to research runs: the content flows have
    neither phase nor question."""
    wanted = run_filter(args)
    client = await connect(settings, ensure_worker=False)
    since = datetime.now(UTC) - args.since
    indexed = indexes_questions(client)
    if wanted == RunFilter(since=args.since):
        query = all_of(one_of("WorkflowType", (WORKFLOW_TYPE, *COUNTED_FLOWS)), f"StartTime > {quoted(instant(since))}")
    else:
        await missing_for(client, wanted)
        query = wanted.visibility_query(question_indexed=indexed)
    keys = (STARTED_BY, USAGE_MEMO) if indexed else (STARTED_BY, USAGE_MEMO, QUESTION)
    try:
        rows = [row for row in await memo_rows(client, query, keys)
                if row.status != WorkflowExecutionStatus.CONTINUED_AS_NEW]
    except RPCError as error:
        raise CliError(f"Could not list runs: {error.message}") from error
    rows = [row for row in rows if wanted.keeps_question(question_in(row.memo.get(QUESTION)), indexed)]
    memos = [usage_in(row.memo.get(USAGE_MEMO)) for row in rows]
    summary = summarise(zip([actor_in(row.memo.get(STARTED_BY)) for row in rows], [kind_of(row) for row in rows],
                            await spent(client, rows, memos), [state_label(row.status) for row in rows], strict=True))
    print(f"Runs started since {since:%Y-%m-%d %H:%M} UTC: {total_line(summary)}")
    for table in summary_tables(summary):
        if len(table) > 1:
            print(f"\n{_table(table)}")
    return 0
