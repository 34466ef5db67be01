"""DeerFlow thread ids to the runs the server started for them.

A thread's runs have workflow ids ``<prefix><thread_id>.<n>`` (n = 1, 2, …): derived, not stored,
so the server holds no state and a restart loses nothing. The prefix is the operator's
(``DEERFLOW_WEB_THREAD_PREFIX``) and a thread id may hold only ``[A-Za-z0-9_-]``, so no thread id
can spell another thread's runs, or a run started by the CLI: feedback sent with a thread id
reaches that thread's newest run and nothing else.

A thread has no cap on its runs: the newest is found by doubling, then bisecting, over the run
numbers (about 2·log2(n) look-ups), and a question always starts the run after it.
"""

from __future__ import annotations

import re

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

THREAD_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ThreadError(ValueError):
    """A thread id or thread state the request cannot be served with; the message says why."""


def checked_thread_id(thread_id: str) -> str:
    if not THREAD_ID.fullmatch(thread_id):
        raise ThreadError("thread_id must be 1-64 characters of letters, digits, '_' or '-'")
    return thread_id


def workflow_id(prefix: str, thread_id: str, number: int) -> str:
    return f"{prefix}{checked_thread_id(thread_id)}.{number}"


async def run_count(client: Client, prefix: str, thread_id: str) -> int:
    """How many runs the thread has (0: none), that is, the number of its newest run.

    A run ``n + 1`` is only ever started after ``n`` was found, so the numbers that exist are
    ``1..count`` with no gap: double until a number is missing, then bisect between the last two.
    """
    found, missing = 0, 1
    while await _exists(client, workflow_id(prefix, thread_id, missing)):
        found, missing = missing, missing * 2
    while missing - found > 1:
        middle = (found + missing) // 2
        if await _exists(client, workflow_id(prefix, thread_id, middle)):
            found = middle
        else:
            missing = middle
    return found


async def _exists(client: Client, workflow: str) -> bool:
    try:
        await client.get_workflow_handle(workflow).describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def latest_run(client: Client, prefix: str, thread_id: str) -> WorkflowHandle:
    """The thread's newest run; a thread with none is an error (feedback needs a run)."""
    count = await run_count(client, prefix, thread_id)
    if count == 0:
        raise ThreadError("this thread has no research run to send feedback to; ask a question first")
    return client.get_workflow_handle(workflow_id(prefix, thread_id, count))
