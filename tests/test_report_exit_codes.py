"""``starter.py report ID`` exits with ``run``'s code for how the run ended (issue #11): 0 for a
research report, 1 failed, 3 direct reply, 4 cancelled or terminated. Until then it exited 0 for a
failed run, so a script took a failure for a report.

In process, against a stand-in for the workflow handle: the decision lives in ``cli/runs.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError

import starter
from cli import runs
from workflows.contracts.research import Outcome, ResearchResult
from workflows.contracts.status import Phase, RunStatus


@dataclass
class StubHandle:
    """What ``report`` asks of a run: how it ended, its result and its status."""

    id: str
    state: WorkflowExecutionStatus
    result_or_error: ResearchResult | BaseException

    async def describe(self) -> Any:
        return SimpleNamespace(status=self.state)

    async def result(self) -> ResearchResult:
        if isinstance(self.result_or_error, BaseException):
            raise self.result_or_error
        return self.result_or_error

    async def query(self, query: object, result_type: type | None = None) -> RunStatus:
        return RunStatus(phase=Phase.COMPLETED)


def report_exit(monkeypatch: pytest.MonkeyPatch, handle: StubHandle) -> int:
    client = SimpleNamespace(get_workflow_handle=lambda run_id, result_type=None: handle)

    async def connect(*_: object, **__: object) -> Any:
        return client

    async def revive(*_: object) -> None:
        return None

    monkeypatch.setattr(runs, "connect", connect)
    monkeypatch.setattr(runs, "revive_worker", revive)
    return starter.main(["report", handle.id])


def failure(cause: BaseException) -> WorkflowFailureError:
    return WorkflowFailureError(cause=cause)


@pytest.mark.parametrize(("state", "result", "code", "said"), [
    (WorkflowExecutionStatus.COMPLETED, ResearchResult(report="# R"), 0, "# R"),
    (WorkflowExecutionStatus.COMPLETED, ResearchResult(report="Hi!", outcome=Outcome.DIRECT_REPLY), 3, "Hi!"),
    (WorkflowExecutionStatus.COMPLETED, ResearchResult(report="No plan", outcome=Outcome.FAILED), 1, "No plan"),
    (WorkflowExecutionStatus.COMPLETED, ResearchResult(report="Late", outcome=Outcome.CANCELLED), 4, "Late"),
    (WorkflowExecutionStatus.FAILED, failure(ApplicationError("Model provider returned HTTP 401: bad key")), 1,
     "Run r failed: Model provider returned HTTP 401: bad key"),
    (WorkflowExecutionStatus.CANCELED, failure(CancelledError("cancelled")), 4, "Run r was cancelled and has no"),
    (WorkflowExecutionStatus.TERMINATED, failure(TerminatedError("by hand")), 4, "Run r was terminated"),
    (WorkflowExecutionStatus.TIMED_OUT, failure(ApplicationError("timed out")), 1, "Run r was timed out"),
], ids=["report", "direct-reply", "failed-outcome", "cancelled-outcome", "failed", "cancelled", "terminated",
        "timed-out"])
def test_report_exits_with_runs_code_for_how_the_run_ended(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], state: WorkflowExecutionStatus,
    result: ResearchResult | BaseException, code: int, said: str,
) -> None:
    assert report_exit(monkeypatch, StubHandle("r", state, result)) == code
    out, err = capsys.readouterr()
    assert said in out + err
    assert code == 0 or "Traceback" not in err


def test_run_follows_the_same_codes_for_a_run_cancelled_while_followed() -> None:
    """``run`` reads the result through the same helper: a cancelled run is 4, a failed one 1."""
    for cause, code in ((CancelledError("cancelled"), 4), (TerminatedError("x"), 4), (ApplicationError("boom"), 1)):
        handle = StubHandle("r", WorkflowExecutionStatus.RUNNING, failure(cause))
        with pytest.raises(runs.CliError) as raised:
            asyncio.run(runs._result(handle))  # type: ignore[arg-type]
        assert raised.value.exit_code == code
