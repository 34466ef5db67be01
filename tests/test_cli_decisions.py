"""How the CLI sends a person's decision (review, answer, budget) as a validated update: one that no
worker takes is reported as waiting, not left silent; the workflow's outcome or refusal comes back.

The update is a stand-in coroutine: what is under test is the CLI's waiting, not the server's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cli import research
from workflows.decisions import Actor
from workflows.models import ReviewOutcome

BY = Actor(name="ana", via="cli")
OUTCOME = ReviewOutcome(accepted=True, message="Plan accepted; the research steps will run now.")


class Handle:
    id = "research-x"


def taking(seconds: float):  # type: ignore[no-untyped-def]
    """An update that a worker answers after ``seconds``."""
    async def update(_handle: Any, _value: Any, _by: Actor) -> ReviewOutcome:
        await asyncio.sleep(seconds)
        return OUTCOME
    return update


async def test_a_decision_no_worker_takes_is_reported_as_waiting_and_still_sent(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(research, "UNTAKEN_NOTICE_SECONDS", 0.05)
    outcome = await research._send_update(Handle(), taking(0.3), "[ACCEPTED]", BY, "feedback")  # type: ignore[arg-type]
    assert outcome == OUTCOME
    notice = capsys.readouterr().err
    assert "No worker has taken the feedback for research-x yet; still waiting" in notice
    assert "python worker.py" in notice and "python starter.py status research-x" in notice


async def test_a_decision_taken_at_once_says_nothing_but_its_outcome(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(research, "UNTAKEN_NOTICE_SECONDS", 0.5)
    outcome = await research._send_update(Handle(), taking(0.01), "[ACCEPTED]", BY, "feedback")  # type: ignore[arg-type]
    assert outcome == OUTCOME and capsys.readouterr().err == ""


@pytest.mark.parametrize("notice_after", [10.0, 0.01], ids=["before the notice", "after it"])
async def test_an_interrupted_wait_stops_the_update_call(monkeypatch: pytest.MonkeyPatch, notice_after: float) -> None:
    monkeypatch.setattr(research, "UNTAKEN_NOTICE_SECONDS", notice_after)
    stopped = asyncio.Event()

    async def forever(_handle: Any, _value: Any, _by: Actor) -> ReviewOutcome:
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.set()
        raise AssertionError("unreachable")

    sending = asyncio.ensure_future(research._send_update(Handle(), forever, "[ACCEPTED]", BY, "feedback"))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    sending.cancel()  # Ctrl-C
    with pytest.raises(asyncio.CancelledError):
        await sending
    await asyncio.wait_for(stopped.wait(), 1)
