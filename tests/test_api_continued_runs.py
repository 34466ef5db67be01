"""The feed follows a run across continue-as-new: the chat turn reaches the report, and the page
feed numbers the runs of the chain from the first, so an offset inside a later run resumes exactly.

Its own module: the worker here continues runs as new after a few dozen events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from temporalio.client import Client

from config.settings import load_settings
from runtime.embedded import has_worker
from tests.support.processes import DevServer, WorkerProcess
from tests.support.web_server import api_server, parse_sse

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
async def base(dev_server: DevServer, client: Client, tmp_path_factory: pytest.TempPathFactory,
               ) -> AsyncIterator[str]:
    log = tmp_path_factory.mktemp("can-worker") / "worker.log"
    process = WorkerProcess(dev_server.address, log, env={"DEERFLOW_CONTINUE_AS_NEW_EVENTS": "30"}).start()
    deadline = time.monotonic() + 60
    while not await has_worker(client):
        assert time.monotonic() < deadline, log.read_text()
        await asyncio.sleep(0.2)
    async with api_server(client, load_settings().model_copy(update={"web_token": None})) as url:
        yield url
    process.stop()


async def test_feed_follows_continue_as_new(base: str, client: Client) -> None:
    body = {"messages": [{"role": "user", "content": "What are the prospects of solid-state batteries for EVs?"}],
            "thread_id": "chain", "auto_accepted_plan": True, "max_step_num": 3}
    async with httpx.AsyncClient(timeout=90) as http:
        turn = parse_sse((await http.post(f"{base}/api/chat/stream", json=body)).text)
        assert turn[-1][0] == "citations", turn[-3:]
        assert [d.get("agent") for k, d in turn if k == "message_chunk"][-1] == "reporter"
        run = "deerflow-web-chain.1"
        text = (await http.get(f"{base}/api/runs/{run}/events")).text
        ids = [line[4:] for line in text.split("\n") if line.startswith("id: ")]
        assert len({item_id.split(".")[0] for item_id in ids}) > 1, ids  # items from more than one run
        later = next(i for i, item_id in enumerate(ids) if not item_id.startswith("0."))
        resumed = (await http.get(f"{base}/api/runs/{run}/events", params={"after": ids[later]})).text
        assert [line[4:] for line in resumed.split("\n") if line.startswith("id: ")] == ids[later + 1:]
    runs = [execution async for execution in client.list_workflows(f"WorkflowId = '{run}'")]
    assert len(runs) > 1
