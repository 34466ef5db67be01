"""The worker's search-attribute check, against a real dev server started without them.

Why: a run that upserts an unregistered attribute fails its workflow task forever, so the
worker must find out reliably whether they exist, register them where it may, and degrade to
"runs without them" (never a crash) where it may not, as on Temporal Cloud.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

from config.settings import load_settings
from runtime import research_client
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.embedded import has_worker, search_attribute_flags
from runtime.search_attributes import ALL_KEYS, dev_server_flags, ensure_search_attributes, missing_search_attributes
from tests.support.processes import DevServer, WorkerProcess
from tests.support.runs import listed, run_id
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.report_style import ReportStyle
from workflows.contracts.research import ResearchRequest
from workflows.research.visibility import AWAITING, PHASE, QUESTION, REPORT_STYLE, START_KEYS, STARTED_BY, UPSERTED_KEYS


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A dev server started WITHOUT our --search-attribute flags."""
    server = DevServer(tmp_path_factory.mktemp("bare") / "temporal.db").start()
    yield server
    server.stop()


def test_dev_server_flags_register_every_key_with_its_type() -> None:
    flags = dev_server_flags()
    assert flags == search_attribute_flags()
    assert flags[::2] == ["--search-attribute"] * len(ALL_KEYS)
    assert flags[1::2] == ["DeerFlowPhase=Keyword", "DeerFlowAwaiting=Keyword", "DeerFlowReportStyle=Keyword",
                           "DeerFlowForkedFrom=Keyword", "DeerFlowStartedBy=Keyword", "DeerFlowQuestion=Text"]


async def test_registers_missing_attributes_then_is_a_no_op(bare_server: DevServer) -> None:
    client = await connect_when_ready(bare_server.address)
    assert {key.name for key in await missing_search_attributes(client)} == {key.name for key in ALL_KEYS}

    assert await ensure_search_attributes(client) is True
    listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace="default"))
    assert {key.name for key in ALL_KEYS} <= set(listed.custom_attributes)

    calls: list[Any] = []
    real_add = client.operator_service.add_search_attributes

    async def counting_add(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return await real_add(*args, **kwargs)

    client.operator_service.add_search_attributes = counting_add  # type: ignore[method-assign]
    assert await ensure_search_attributes(client) is True
    assert calls == [], "a second call must not try to register anything"


async def test_dev_server_started_with_the_flags_needs_nothing(tmp_path: Path) -> None:
    server = DevServer(tmp_path / "temporal.db", extra_args=dev_server_flags()).start()
    try:
        client = await connect_when_ready(server.address)
        assert await missing_search_attributes(client) == []
    finally:
        server.stop()


def registration_refused(client: Client, hidden: tuple[SearchAttributeKey[str], ...]) -> list[Any]:
    """The namespace lists none of ``hidden`` and refuses to register anything, as Temporal Cloud does
    for a key without the permission; returns the list requests, as they come."""
    listed: list[Any] = []

    async def without(request: ListSearchAttributesRequest, **_: Any) -> Any:
        listed.append(request)
        response = await type(client.operator_service).list_search_attributes(client.operator_service, request)
        for key in hidden:
            if key.name in response.custom_attributes:
                del response.custom_attributes[key.name]
        return response

    async def refuse(*_: Any, **__: Any) -> Any:
        raise RPCError("Request unauthorized.", RPCStatusCode.PERMISSION_DENIED, b"")

    client.operator_service.list_search_attributes = without  # type: ignore[method-assign]
    client.operator_service.add_search_attributes = refuse  # type: ignore[method-assign]
    return listed


async def test_refused_registration_returns_false_without_raising(
    bare_server: DevServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = await connect_when_ready(bare_server.address, namespace="default")
    listed = registration_refused(client, hidden=ALL_KEYS)
    with caplog.at_level(logging.WARNING, logger="runtime.search_attributes"):
        assert await ensure_search_attributes(client) is False
    assert "Request unauthorized" in caplog.text
    assert len(listed) == 2, "after a refusal it looks once more (another worker may have registered them)"


async def test_without_the_starters_attributes_runs_still_upsert_their_phase(
    bare_server: DevServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A cluster that registered the phase attributes before DeerFlowStartedBy and DeerFlowQuestion
    existed, where the worker may not register: its runs keep their phases in the index."""
    client = await connect_when_ready(bare_server.address, namespace="default")
    assert await ensure_search_attributes(client) is True  # all of them, on this server
    registration_refused(client, hidden=START_KEYS)
    with caplog.at_level(logging.WARNING, logger="runtime.search_attributes"):
        assert await ensure_search_attributes(client) is True
    assert "DeerFlowStartedBy, DeerFlowQuestion" in caplog.text and "DeerFlowPhase" not in caplog.text


async def test_a_run_starts_where_the_starters_attributes_are_missing(tmp_path: Path) -> None:
    """research_client.start sets DeerFlowStartedBy and DeerFlowQuestion; a namespace without them
    (the server refuses the start naming one) gets the run without them."""
    upserted = [arg for key in UPSERTED_KEYS for arg in ("--search-attribute", f"{key.name}=Keyword")]
    server = DevServer(tmp_path / "temporal.db", extra_args=upserted).start()
    try:
        client = await connect_when_ready(server.address, data_converter=data_converter(load_settings()))
        assert {key.name for key in await missing_search_attributes(client)} == {key.name for key in START_KEYS}
        handle = await research_client.start(client, ResearchRequest(question="How do tides work?"),
                                             run_id=run_id("no-starter-attrs"), summary="tides",
                                             started_by=Actor(name="ann", via=Via.CLI))
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(STARTED_BY) is None and attributes.get(QUESTION) is None
        await handle.terminate()
    finally:
        server.stop()


async def test_unreachable_operator_service_returns_false(bare_server: DevServer) -> None:
    client = await connect_when_ready(bare_server.address)

    async def unavailable(*_: Any, **__: Any) -> Any:
        raise RPCError("operator service unimplemented", RPCStatusCode.UNIMPLEMENTED, b"")

    client.operator_service.list_search_attributes = unavailable  # type: ignore[method-assign]
    assert await ensure_search_attributes(client) is False


async def test_worker_registers_them_and_runs_set_them(tmp_path: Path) -> None:
    """The whole chain: worker start-up registers them on a bare server, and a run upserts them."""
    server = DevServer(tmp_path / "temporal.db").start()
    worker: WorkerProcess | None = None
    try:
        client = await connect_when_ready(server.address, data_converter=data_converter(load_settings()))
        assert len(await missing_search_attributes(client)) == len(ALL_KEYS)
        worker = WorkerProcess(server.address, tmp_path / "worker.log").start()
        deadline = time.monotonic() + 60
        while not await has_worker(client):
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()
            await asyncio.sleep(0.2)
        assert await missing_search_attributes(client) == []

        request = ResearchRequest(question="How do heat pumps work?", auto_accept_plan=True, max_step_num=1,
                                  report_style=ReportStyle.NEWS)
        handle = await research_client.start(client, request, run_id=run_id("sa"), summary="heat pumps",
                                             started_by=Actor(name="o'brien", via=Via.CLI))
        await asyncio.wait_for(handle.result(), 90)
        attributes = (await handle.describe()).typed_search_attributes
        assert attributes.get(PHASE) == "completed"
        assert attributes.get(AWAITING) == ""
        assert attributes.get(REPORT_STYLE) == "news"
        assert attributes.get(STARTED_BY) == "cli:o%27brien" and attributes.get(QUESTION) == request.question
        # Every phase is upserted, the first one too, though the run config that says the
        # attributes exist arrives after it (it loads beside the coordinator's first turn).
        upserted = [json.loads(fields[PHASE.name].data) for event in (await handle.fetch_history()).events
                    if PHASE.name in (fields := event.upsert_workflow_search_attributes_event_attributes
                                      .search_attributes.indexed_fields)]
        assert upserted[0] == "coordinating" and upserted[-1] == "completed"
        # ...and so the list of runs can be filtered by them.
        await listed(client, "DeerFlowPhase = 'completed'", lambda runs: handle.id in {run.id for run in runs})
        await listed(client, "DeerFlowStartedBy = 'cli:o%27brien' AND DeerFlowQuestion = 'pumps'",
                     lambda runs: [run.id for run in runs] == [handle.id])
    finally:
        if worker is not None:
            worker.stop()
        server.stop()
