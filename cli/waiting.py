"""Waiting on a worker out loud: a command whose call only a worker can answer (a decision's
validation, a status query) says so when none has after :data:`NOTICE_SECONDS`, instead of sitting
silent while a deployment's workers are down, and goes on waiting."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

NOTICE_SECONDS = 5.0


async def noticed(call: Awaitable[T], notice: str) -> T:
    """``await call``, printing ``notice`` to stderr if it has not answered within
    :data:`NOTICE_SECONDS`; the call is stopped when the wait is (Ctrl-C)."""
    answer = asyncio.ensure_future(call)
    try:
        if not (await asyncio.wait({answer}, timeout=NOTICE_SECONDS))[0]:
            print(notice, file=sys.stderr)
        return await answer
    finally:
        answer.cancel()  # a no-op once it is done
