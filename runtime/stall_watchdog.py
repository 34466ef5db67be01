"""Ends a process whose event loop has stalled, so that whatever supervises it starts a new one.

Why: a worker whose event loop is stuck (a blocking call that never returns, a deadlock, a C
extension holding the GIL) still looks alive from outside: its process runs, so ``starter.py
serve``'s keeper leaves it be, and compose and Kubernetes only restart a process that exits. Its SDK
core even keeps polling in its own threads, so the tasks it takes (retries of its own lost calls
among them) sit in it until they time out, again and again: every run it touches is wedged for as
long as it lives. A worker that leaves instead is replaced by its supervisor within seconds, and the
new one's reclaim retries what it held (hosting/reclaim.py).

How: :func:`faulthandler.dump_traceback_later` runs a timer in a C thread that needs neither the
event loop nor the GIL; the loop re-arms it every few seconds. If the loop stops re-arming it for the
whole stall, the timer writes every thread's traceback to stderr (the log shows where the loop was
stuck) and exits the process with status 1. A process paused from outside (SIGSTOP, a frozen cgroup)
for longer than the stall leaves the same way once it resumes: it is then restarted, as after a crash.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import sys

# How often the loop re-arms the timer, at most: often enough that a loop merely late under load
# (a batch host at nice 15 runs it seconds late at worst) never lets a stall of a minute run out.
REARM_SECONDS = 5.0

logger = logging.getLogger(__name__)


async def exit_if_stalled(stall_seconds: float) -> None:
    """Until cancelled, end the process (status 1, every thread's traceback on stderr) once its event
    loop has run nothing for ``stall_seconds`` (and at most a quarter of that, 5 s at most, more);
    0 watches nothing. One per process: the timer is the interpreter's only one."""
    if stall_seconds <= 0:
        return
    rearm = min(REARM_SECONDS, stall_seconds / 4)
    # Said once at start, so that whoever reads the log later knows what a "Timeout (...)!" there means.
    logger.info("Stall watchdog: an event loop stuck for %g s ends this process (status 1) after writing "
                "every thread's traceback under \"Timeout (...)!\"", stall_seconds)
    try:
        while True:
            # One re-arm more: the loop may stall just before its next one is due.
            faulthandler.dump_traceback_later(stall_seconds + rearm, exit=True, file=sys.stderr)
            await asyncio.sleep(rearm)
    finally:
        faulthandler.cancel_dump_traceback_later()
