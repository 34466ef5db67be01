"""Work a run does side by side (a turn's tool calls, parallel steps, the config and the
coordinator, a podcast's lines), which all ends before the run does.

``asyncio.gather`` returns as soon as one of its tasks is cancelled and leaves the others running.
When the run is cancelled, the run then ended (its last command: cancel the execution) while the
others were still ending their own cancelled calls, and what they did then (the SDK records a patch
marker the first time a call is cancelled) came after the run's last command in the same workflow
task, which the server refuses ("CancelWorkflowExecution must be the last command"), again at every
retry of the task. :func:`together` waits for every task before the cancellation goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

ResultT = TypeVar("ResultT")


async def together(*work: Awaitable[ResultT]) -> list[ResultT]:
    """The results of ``work``, in order, as ``asyncio.gather`` gives them; cancelled, every task is
    cancelled and has ended before the cancellation is raised."""
    tasks = [asyncio.ensure_future(each) for each in work]
    try:
        return list(await asyncio.gather(*tasks))
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)  # not empty: a gather of nothing cannot be cancelled
        raise
