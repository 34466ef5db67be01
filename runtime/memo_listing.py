"""Every run a query matches, read for a few fields of its memo: what ``starter.py costs`` sums (issue #46).

Why not ``Client.list_workflows``: the SDK builds each row whole, decoding every search attribute
twice (untyped and typed), and each ``memo_value`` binds a new data converter to its run (a new
payload converter each time). With 1,000 runs that was 0.5-1 s of the command's own work beside the
server's answer (bench/README.md, issue #46). Here the server's pages are read as they come, and
the memo fields asked for are decoded for the whole listing in one call of one converter bound to a
workflow's context: our codecs bind by the kind of context, never by the run (storage/subtrees.py
``with_context``, runtime/encryption.py ``KeylessGuard``), so that converter reads each run's memo
as the SDK's binding to that run would (tests/test_bulk_decisions.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListWorkflowExecutionsRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.converter import DataConverter, WorkflowSerializationContext

PAGE_SIZE = 1_000  # the server's own cap on a page


@dataclass(frozen=True)
class MemoRow:
    """One run as the listing has it: what ``costs`` needs to count it (cli/costs.py ``Counted``)."""

    id: str
    run_id: str
    workflow_type: str
    status: WorkflowExecutionStatus | None
    memo: Mapping[str, Any]  # the fields asked for that the run has and that decode


async def memo_rows(client: Client, query: str, keys: Collection[str]) -> list[MemoRow]:
    """Every run ``query`` matches (newest first, as the server orders them), with the memo fields
    ``keys`` decoded; a field that cannot be read is left out, as if the run did not say."""
    infos = await _every_page(client, query)
    memos = await memo_fields(client, infos, keys)
    return [MemoRow(info.execution.workflow_id, info.execution.run_id, info.type.name,
                    WorkflowExecutionStatus(info.status) if info.status else None, memo)
            for info, memo in zip(infos, memos, strict=True)]


async def memo_fields(client: Client, infos: Sequence[WorkflowExecutionInfo],
                      keys: Collection[str]) -> list[dict[str, Any]]:
    """Each listed run's memo fields ``keys``, decoded in one call of one converter (the module's
    docstring says why one serves every run); a field that cannot be read is left out, as if the run
    did not say. Also what runtime/run_listing.py reads each page's questions and starters with."""
    wanted = [(row, key) for row, info in enumerate(infos) for key in keys if key in info.memo.fields]
    converter = client.data_converter.with_context(
        WorkflowSerializationContext(namespace=client.namespace, workflow_id=infos[0].execution.workflow_id)
    ) if infos else client.data_converter
    values = await decode_each(converter, [infos[row].memo.fields[key] for row, key in wanted])
    memos: list[dict[str, Any]] = [{} for _ in infos]
    for (row, key), value in zip(wanted, values, strict=True):
        if value is not UNREADABLE:
            memos[row][key] = value
    return memos


async def _every_page(client: Client, query: str) -> list[WorkflowExecutionInfo]:
    infos: list[WorkflowExecutionInfo] = []
    token = b""
    while True:
        page = await client.workflow_service.list_workflow_executions(ListWorkflowExecutionsRequest(
            namespace=client.namespace, query=query, page_size=PAGE_SIZE, next_page_token=token), retry=True)
        infos.extend(page.executions)
        if not (token := page.next_page_token):
            return infos


UNREADABLE = object()  # a payload no decoding could read


async def decode_each(converter: DataConverter, payloads: Sequence[Payload]) -> list[Any]:
    """Each payload's value, all in one call; where one of them cannot be read (anyone who may start
    workflows may write any memo) each is decoded on its own, the unreadable ones as ``UNREADABLE``."""
    if not payloads:
        return []
    try:
        return await converter.decode(payloads)
    except Exception:  # a bad payload is the writer's: it must not hide the others
        values = []
        for payload in payloads:
            try:
                [value] = await converter.decode([payload])
            except Exception:
                value = UNREADABLE
            values.append(value)
        return values
