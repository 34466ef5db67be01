"""The research client's own handling of what the server answers (runtime/research_client.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from runtime import research_client
from tests.support.status_samples import sample_status
from workflows.models import RunStatus


def cancelled() -> RPCError:
    # What the dev server answered a status query sent as the worker holding the run was killed.
    return RPCError("context canceled", RPCStatusCode.CANCELLED, b"")


class AnsweringHandle:
    """A workflow handle whose status queries meet ``errors`` first, one per query, then answer."""

    def __init__(self, *errors: RPCError) -> None:
        self.errors = list(errors)
        self.queries = 0

    async def query(self, query: Any) -> RunStatus:
        assert query.__name__ == "status"
        self.queries += 1
        if self.errors:
            raise self.errors.pop(0)
        return sample_status()


async def status_of(handle: AnsweringHandle) -> RunStatus:
    return await research_client.status(cast(WorkflowHandle[Any, Any], handle))


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(research_client, "CANCELLED_QUERY_PAUSE_SECONDS", 0.001)


async def test_a_query_cancelled_as_a_worker_died_is_asked_again() -> None:
    handle = AnsweringHandle(cancelled(), cancelled())
    assert await status_of(handle) == sample_status()
    assert handle.queries == 3


async def test_a_query_cancelled_every_time_fails_after_a_few_attempts() -> None:
    handle = AnsweringHandle(*(cancelled() for _ in range(10)))
    with pytest.raises(RPCError, match="context canceled"):
        await status_of(handle)
    assert handle.queries == research_client.CANCELLED_QUERY_RETRIES + 1


@pytest.mark.parametrize("error", [
    RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b""),
    RPCError("no poller seen for task queue recently", RPCStatusCode.FAILED_PRECONDITION, b""),
])
async def test_other_errors_go_to_the_caller_at_once(error: RPCError) -> None:
    handle = AnsweringHandle(error)
    with pytest.raises(RPCError) as raised:
        await status_of(handle)
    assert raised.value is error and handle.queries == 1
