"""Liveness and readiness probes: ``GET /healthz`` and ``GET /readyz``, for compose and Kubernetes.

Live: the process's event loop answers. Ready: it can do its job now. For the worker that is
Temporal answering and every queue it serves listing this very worker (its identity) as a poller;
for the API server, Temporal answering; the codec server needs no Temporal and is ready once it
listens. A probe answers 200 ``ok`` / ``ready`` or 503 with the reason, and never says more (no
setting, no key), since probes are often open to the node without a token.

The worker has no web server, so it serves the two paths itself on ``DEERFLOW_HEALTH_ADDRESS``
(host:port) with a few lines of HTTP/1.1 on asyncio; the web servers route them ahead of their
token and Host checks (:func:`with_probes`), because a kubelet's probe carries neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, GetSystemInfoRequest
from temporalio.client import Client

LIVE, READY = "/healthz", "/readyz"
RPC_TIMEOUT = timedelta(seconds=5)
READ_TIMEOUT_SECONDS = 5.0
MAX_REQUEST_BYTES = 8192
# None when ready, else a short reason.
Readiness = Callable[[], Awaitable[str | None]]

logger = logging.getLogger(__name__)


async def temporal_problem(client: Client) -> str | None:
    try:
        await client.workflow_service.get_system_info(GetSystemInfoRequest(), timeout=RPC_TIMEOUT)
    except Exception:  # any failure of the call means the same to a probe
        return "Temporal does not answer"
    return None


def worker_readiness(client: Client, identity: str, queues: Sequence[tuple[str, bool]]) -> Readiness:
    """Ready when Temporal lists ``identity`` polling each ``(queue, is_workflow_queue)``."""

    async def problem() -> str | None:
        for queue, workflows in queues:
            kind = TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW if workflows else TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
            try:
                response = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
                    namespace=client.namespace, task_queue=TaskQueue(name=queue), task_queue_type=kind),
                    timeout=RPC_TIMEOUT)
            except Exception:
                return "Temporal does not answer"
            if identity not in {poller.identity for poller in response.pollers}:
                return f"not polling {queue} yet"
        return None

    return problem


def answer(path: str, problem: str | None) -> tuple[int, str]:
    """Status and body of a probe path, given readiness (``problem``) for ``/readyz``."""
    if path == LIVE:
        return 200, "ok\n"
    return (200, "ready\n") if problem is None else (503, f"not ready: {problem}\n")


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ready: Readiness) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_SECONDS)
        method, path, _ = head[:MAX_REQUEST_BYTES].decode("latin-1").split(" ", 2)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
        writer.close()
        return
    path = path.split("?", 1)[0]
    if method not in ("GET", "HEAD") or path not in (LIVE, READY):
        status, body = 404, "not found\n"
    else:
        status, body = answer(path, await ready() if path == READY else None)
    reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
    data = body.encode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                 + (b"" if method == "HEAD" else data))
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def probe_server(address: str | None, ready: Readiness) -> AsyncIterator[None]:
    """Serve the probes on ``address`` (host:port) while the block runs; nothing when it is None."""
    if not address:
        yield
        return
    host, _, port = address.rpartition(":")
    server = await asyncio.start_server(lambda r, w: _serve_one(r, w, ready), host.strip("[]"), int(port),
                                        limit=MAX_REQUEST_BYTES)
    logger.info("Serving probes at http://%s%s and %s", address, LIVE, READY)
    try:
        yield
    finally:
        server.close()


def with_probes(app: Any, ready: Readiness) -> Any:
    """An ASGI app answering the probe paths itself and passing everything else to ``app``."""

    async def routed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in (LIVE, READY) or scope["method"] not in ("GET", "HEAD"):
            await app(scope, receive, send)
            return
        status, body = answer(scope["path"], await ready() if scope["path"] == READY else None)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body.encode()})

    return routed


async def always_ready() -> str | None:
    """The codec server's readiness: it needs no Temporal, so listening is enough."""
    return None
