"""The research client's own handling of what the server answers (runtime/research_client.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from runtime import research_client
from tests.support.status_samples import sample_status
from workflows.contracts.budget import BudgetAction, BudgetDecision
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.status import RunStatus


def cancelled() -> RPCError:
    # What the dev server answered a status query sent as the worker holding the run was killed.
    return RPCError("context canceled", RPCStatusCode.CANCELLED, b"")


class AnsweringHandle:
    """A workflow handle whose status queries meet ``errors`` first, one per query, then answer."""

    def __init__(self, *errors: RPCError) -> None:
        self.errors = list(errors)
        self.queries = 0

    async def query(self, query: str, *, result_type: type) -> RunStatus:
        assert (query, result_type) == ("status", RunStatus)
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


class RecordingHandle:
    """A workflow handle that records what each query and update was sent as, and answers nothing."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, object]] = []

    async def query(self, name: str, *, result_type: type) -> None:
        self.sent.append(("query", name, result_type))

    async def execute_update(self, name: str, *, args: list[Any], result_type: type, id: str | None = None) -> None:
        self.sent.append(("update", name, result_type))


async def test_each_handler_is_sent_by_the_workflows_name_and_read_as_the_type_it_returns() -> None:
    """The client names the handlers instead of referring to the workflow's methods (which would import
    the workflow's code into every command): the names and result types must be the workflow's own."""
    from workflows.research.workflow import DeepResearchWorkflow

    definition = workflow._Definition.must_from_class(DeepResearchWorkflow)
    declared = {("query", name): query.ret_type for name, query in definition.queries.items()}
    declared.update({("update", name): update.ret_type for name, update in definition.updates.items()})
    handle = RecordingHandle()
    typed = cast(WorkflowHandle[Any, Any], handle)
    by = Actor(name="someone", via=Via.CLI)
    await research_client.status(typed)
    await research_client.checkpoint(typed)
    await research_client.review_plan(typed, "[ACCEPTED]", by)
    await research_client.answer_clarification(typed, "the EU", by)
    await research_client.decide_budget(typed, BudgetDecision(action=BudgetAction.FINISH), by)
    assert len(handle.sent) == 5
    for kind, name, result_type in handle.sent:
        assert declared.get((kind, name)) is result_type, f"{kind} {name}"
