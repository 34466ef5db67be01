"""Forking a research run from a front door (``starter.py fork``, the API server), and the links
between a run and its forks, both ways.

The fork's request is the source's own, read from the source's history (its start input), with
the report style and locale the person chose and the fork's point; the state the fork reuses is
not in it (the fork's worker reads it from the source: workflows/research/fork.py). Before starting, the
door reads the source's state once itself (the ``checkpoint`` query) and refuses a point the
source never reached, so the person hears why at once rather than from a failed run.

Links: a fork names its source in its request and status (``forked_from``) and in its memo (with
the point, for listings). A source is closed and its state cannot change, so its forks are found
by the server's index instead: the ``DeerFlowForkedFrom`` search attribute each fork sets (a
visibility query), or, on a namespace without our attributes, the memos of the latest runs. Which
of them a caller may see is the caller's door's to decide.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecution, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from runtime import research_client
from runtime.run_memo import FORKED_FROM, forked_from_memo, started_by
from runtime.visibility_query import quoted
from workflows.contracts.decisions import Actor
from workflows.contracts.fork_point import ForkPoint
from workflows.contracts.report_style import ReportStyle
from workflows.contracts.research import WORKFLOW_TYPE, ResearchRequest
from workflows.research.fork_seed import ForkRefused, fork_seed
from workflows.research.visibility import FORKED_FROM as FORKED_FROM_ATTRIBUTE

MAX_FORKS_LISTED = 100
# Runs read for their memos where the namespace lacks the search attribute (newest first).
MAX_RUNS_SCANNED = 1000


class ForkError(ValueError):
    """A fork the door refuses; the message says why, in words the person can act on."""


@dataclass(frozen=True)
class ForkListed:
    """A fork of a run, as a listing shows it."""

    workflow_id: str
    at: str  # "plan", "step 2", "report"; "" where its memo does not say
    started_by: Actor | None
    status: str  # the server's: running, completed, failed, …


async def fork_request(client: Client, source: WorkflowHandle, point: ForkPoint, *,
                       report_style: ReportStyle | None = None, locale: str | None = None) -> ResearchRequest:
    """The request of a fork of ``source`` at ``point`` (its ``run_id`` pinned to the source's
    current run), once the source's state shows it reached the point; ``ForkError`` if not."""
    description = await source.describe()
    if description.workflow_type != WORKFLOW_TYPE:
        raise ForkError(f"{source.id} is not a research run")
    pinned = client.get_workflow_handle(source.id, run_id=description.run_id)
    point = point.model_copy(update={"run_id": description.run_id})
    try:
        fork_seed(await research_client.checkpoint(pinned), point)
    except ForkRefused as refused:
        raise ForkError(f"Cannot fork {source.id} at {point.label}: {refused}") from None
    changed = {"report_style": report_style, "locale": locale}
    fields = {**(await _source_request(client, pinned)).model_dump(mode="json"), "forked_from": point.model_dump(),
              **{name: value for name, value in changed.items() if value is not None}}
    try:
        return ResearchRequest.model_validate(fields)
    except ValidationError as error:
        raise ForkError(f"Cannot fork {source.id}: {error.errors()[0]['msg']}") from None


async def _source_request(client: Client, handle: WorkflowHandle) -> ResearchRequest:
    """The request the source run was started with (a run continued as new carries the same one)."""
    async for event in handle.fetch_history_events(page_size=1):
        payloads = event.workflow_execution_started_event_attributes.input.payloads
        if payloads:
            try:
                request = (await client.data_converter.decode(payloads[:1], [ResearchRequest]))[0]
            except Exception as error:  # a request this code no longer reads, or no key to decrypt it
                raise ForkError(f"the request of {handle.id} cannot be read: {error}") from None
            if isinstance(request, ResearchRequest):
                return request
        break
    raise ForkError(f"the request of {handle.id} cannot be read")


def fork_id(source_id: str, suffix: str) -> str:
    """The fork's workflow id: its source's, marked as a fork (``suffix``: a few random characters)."""
    return f"{source_id[:200]}-fork-{suffix}"


async def forks_of(client: Client, workflow_id: str) -> list[ForkListed]:
    """The forks of run ``workflow_id`` (newest first, at most ``MAX_FORKS_LISTED``), whoever started
    them. Without the attribute, the newest ``MAX_RUNS_SCANNED`` runs are read (a fork is newer than its
    source, so it is among them unless that many runs started since)."""
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND {FORKED_FROM_ATTRIBUTE.name} = {quoted(workflow_id)}"
    try:
        return [await _listed(execution) async for execution in client.list_workflows(query, limit=MAX_FORKS_LISTED)]
    except RPCError as error:
        if error.status != RPCStatusCode.INVALID_ARGUMENT:  # the namespace does not know the attribute
            raise
    forks: list[ForkListed] = []
    async for execution in client.list_workflows(f"WorkflowType = '{WORKFLOW_TYPE}'", limit=MAX_RUNS_SCANNED):
        memo = forked_from_memo(await execution.memo_value(FORKED_FROM, None))
        if memo is not None and memo["workflow_id"] == workflow_id:
            forks.append(await _listed(execution, memo))
            if len(forks) == MAX_FORKS_LISTED:
                break
    return forks


async def _listed(execution: WorkflowExecution, memo: dict[str, str] | None = None) -> ForkListed:
    """A fork as listed; ``memo``: its ``forked_from`` entry, when the caller has read it already."""
    memo = memo or forked_from_memo(await execution.memo_value(FORKED_FROM, None))
    return ForkListed(workflow_id=execution.id, at=memo.get("at", "") if memo else "",
                      started_by=await started_by(execution),
                      status=execution.status.name.lower() if execution.status else "unknown")

