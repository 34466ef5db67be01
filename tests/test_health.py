"""Liveness and readiness probes (runtime/health.py; issue #22).

Why: an orchestrator restarts what is not live and routes to or waits for only what is ready. A
worker that is up but not polling (Temporal unreachable, a queue not served) must not report ready,
and the probes must answer without the web servers' token or Host checks, which a kubelet cannot pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import httpx
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from runtime.embedded import free_port
from runtime.health import probe_server, temporal_problem, with_probes, worker_readiness
from tests.support.processes import DevServer


@activity.defn
async def nothing() -> None:
    """An activity for a worker that only has to poll."""


@contextlib.asynccontextmanager
async def probes(ready) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
    address = f"127.0.0.1:{free_port()}"
    async with probe_server(address, ready):
        yield f"http://{address}"


async def test_the_worker_is_ready_only_while_temporal_lists_it_polling_each_queue(
        dev_server: DevServer, client: Client) -> None:
    queue, identity = f"probe-{uuid.uuid4().hex[:8]}", f"{uuid.uuid4().hex[:8]}@probe"
    ready = worker_readiness(client, identity, [(queue, False)])
    async with probes(ready) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/healthz")).status_code == 200
        before = await http.get("/readyz")
        assert before.status_code == 503 and before.text == f"not ready: not polling {queue} yet\n"
        worker = Worker(client, task_queue=queue, activities=[nothing], identity=identity)
        async with worker:
            for _ in range(100):
                response = await http.get("/readyz")
                if response.status_code == 200:
                    break
                await asyncio.sleep(0.2)
            assert (response.status_code, response.text) == (200, "ready\n")
        assert (await http.get("/nowhere")).status_code == 404
        assert (await http.post("/readyz")).status_code == 404


async def test_readiness_fails_when_temporal_does_not_answer(client: Client) -> None:
    assert await temporal_problem(client) is None
    dead = await Client.connect(f"127.0.0.2:{free_port()}", lazy=True)  # nothing listens there
    assert await temporal_problem(dead) == "Temporal does not answer"
    assert await worker_readiness(dead, "x@y", [("q", True)])() == "Temporal does not answer"


async def test_web_servers_answer_probes_ahead_of_their_guards() -> None:
    async def refused(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await send({"type": "http.response.start", "status": 401, "headers": []})
        await send({"type": "http.response.body", "body": b"token"})

    async def not_ready() -> str:
        return "Temporal does not answer"

    # A kubelet's probe: addressed to the pod's IP, without the token.
    app = with_probes(refused, not_ready)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://10.1.2.3") as http:
        assert (await http.get("/healthz")).status_code == 200
        response = await http.get("/readyz")
        assert (response.status_code, response.text) == (503, "not ready: Temporal does not answer\n")
        assert (await http.get("/api/runs")).status_code == 401
