"""``server.decisions.decided`` past its bound, whichever way the update call ends when cancelled: as
the SDK's update timeout, which the routes answer 504 (tests/test_api_no_worker.py runs the real one)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError

from server import decisions
from workflows.contracts.decisions import Actor
from workflows.contracts.research import ReviewOutcome


async def cancelled_plainly(_handle: Any, _value: Any, _by: Actor) -> ReviewOutcome:
    """An update call that ends cancelled (not turned into the SDK's error, as its RPC wait is)."""
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


async def test_a_plainly_cancelled_update_past_the_bound_is_the_sdks_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decisions, "DECISION_WAIT_SECONDS", 0.05)
    with pytest.raises(WorkflowUpdateRPCTimeoutOrCancelledError):
        await decisions.decided(None, cancelled_plainly, "[ACCEPTED]", Actor(name="ana", via="api"))  # type: ignore[arg-type]
