"""One MCP client session per activity: open it, run the work, close it, and name what went wrong.

* Each activity opens its own client session (stdio: spawn the command; sse/streamable_http:
  connect to the URL), initializes, does one thing and closes. No session outlives an activity, so
  nothing is shared between workers or leaks across retries.
* A server's stderr never leaves the worker: a failure says how much it wrote, and its scrubbed tail
  goes to the worker's log (the scrub interceptor cleans the rest).
* Failures the client sees are sorted for the retry policy: a server that cannot be started or
  reached, crashes or does not answer in time is ``MCPUnavailable`` (retryable); a wrong URL, token
  or command is ``MCPConfigError``.
* A stdio child must not outlive its activity. The SDK's transport stops it (close stdin, SIGTERM,
  SIGKILL to its process group) in a shielded block, but a second native ``task.cancel()`` (Temporal
  can cancel an activity task more than once) would interrupt that block; ``finish_cleanup_on_cancel``
  makes the session's own task see exactly one cancellation and waits for its cleanup.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any, TypeVar

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.guards.secret_scrubber import SecretScrubber
from activities.mcp.checks import ConnectionPlan, child_environment, config_error, plan_connection, unavailable_error
from activities.mcp.lenient_wire import MendingReadStream, MendingTransport
from config.mcp_servers import MCPServerConfig
from config.settings import Settings

# Module level so tests can shorten them.
CONNECT_TIMEOUT_SECONDS = 20.0  # spawn or connect, plus the initialize handshake
LIST_TIMEOUT_SECONDS = 20.0  # every page of tools/list together
CALL_TIMEOUT_SECONDS = 60.0  # one tools/call
# Idle time allowed on an HTTP response stream; the timeouts above bound the whole exchange.
HTTP_READ_TIMEOUT_SECONDS = CALL_TIMEOUT_SECONDS + 30.0
STDERR_TAIL_CHARS = 1_000

T = TypeVar("T")

_NO_SECRETS = SecretScrubber(())


@dataclass
class Progress:
    """Where a session got to, so a timeout or a dropped connection can be reported precisely."""

    phase: str = "starting"
    timeout: float = CONNECT_TIMEOUT_SECONDS
    stderr: IO[str] | None = None
    scrubber: SecretScrubber = _NO_SECRETS  # for the stderr tail the worker logs
    # The status of the last failed POST: the streamable HTTP transport turns a 401 or 404 into a
    # generic JSON-RPC error, and the status is what tells a wrong URL or token from a server in
    # trouble. (Failed GETs are not kept: a 405 for the optional GET stream is normal.)
    http_status: int | None = None

    def step(self, phase: str, timeout: float) -> AbstractContextManager[anyio.CancelScope]:
        """Enter ``phase``, bounded by ``timeout`` seconds (a TimeoutError when it runs out)."""
        self.phase = phase
        self.timeout = timeout
        return anyio.fail_after(timeout)

    async def record_response(self, response: httpx2.Response) -> None:
        """httpx2 response hook keeping the status of the last failed POST."""
        if response.status_code >= 400 and response.request.method == "POST":
            self.http_status = response.status_code

    def http_client(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        """The SDK's HTTP client settings (``create_mcp_http_client``) plus the status hook."""
        return httpx2.AsyncClient(
            headers=headers,
            timeout=timeout or httpx2.Timeout(CONNECT_TIMEOUT_SECONDS, read=HTTP_READ_TIMEOUT_SECONDS),
            auth=auth,
            event_hooks={"response": [self.record_response]},
            transport=MendingTransport(httpx2.AsyncHTTPTransport()),  # lone surrogates read as U+FFFD
        )

    def stderr_note(self, label: str) -> str:
        """A sentence for the failure saying the server wrote to stderr; the text itself is only logged.

        A server's stderr can hold anything (its environment, a token in a traceback), so it never
        goes into the failure, which lands in history. Its end, scrubbed, goes to the worker's log
        for the operator.
        """
        if self.stderr is None:
            return ""
        try:
            self.stderr.flush()
            size = self.stderr.seek(0, os.SEEK_END)
            self.stderr.seek(max(0, size - 4 * STDERR_TAIL_CHARS))
            text = self.stderr.read().strip()
        except (OSError, ValueError):
            return ""
        if not text:
            return ""
        activity.logger.warning("%s stderr ends with: %s", label, self.scrubber.scrub(text[-STDERR_TAIL_CHARS:]))
        return f" It wrote {size} bytes to stderr (its end is in the worker's log)."


@asynccontextmanager
async def open_session(plan: ConnectionPlan, progress: Progress) -> AsyncIterator[ClientSession]:
    """An initialized ``ClientSession``; leaving the block closes it and stops or disconnects the server.

    No deadline scope surrounds entering the transports: an anyio scope must not close while a task
    group opened inside it lives on. Spawning is immediate, HTTP connects are bounded by the client's
    connect timeout, and the handshake has its own deadline.
    """
    async with AsyncExitStack() as stack:
        progress.phase = "connecting"
        progress.timeout = CONNECT_TIMEOUT_SECONDS
        if plan.transport == "stdio":
            assert plan.command is not None
            params = StdioServerParameters(
                command=plan.command,
                args=list(plan.args),
                env=child_environment(dict(plan.env)),
                encoding_error_handler="replace",  # bytes that are not UTF-8: U+FFFD, not a dead reader
            )
            errlog = progress.stderr if progress.stderr is not None else sys.stderr
            streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        elif plan.transport == "sse":
            assert plan.url is not None
            streams = await stack.enter_async_context(
                sse_client(
                    plan.url,
                    headers=dict(plan.headers),
                    timeout=CONNECT_TIMEOUT_SECONDS,
                    sse_read_timeout=HTTP_READ_TIMEOUT_SECONDS,
                    httpx_client_factory=progress.http_client,
                )
            )
        else:
            assert plan.url is not None
            http = await stack.enter_async_context(progress.http_client(headers=dict(plan.headers)))
            streams = await stack.enter_async_context(streamable_http_client(plan.url, http_client=http))
        read_stream, write_stream = streams
        session = await stack.enter_async_context(ClientSession(MendingReadStream(read_stream), write_stream))
        with progress.step("initializing", CONNECT_TIMEOUT_SECONDS):
            await session.initialize()
        yield session


async def with_session(
    server_name: str,
    server: MCPServerConfig,
    settings: Settings,
    scrubber: SecretScrubber,
    work: Callable[[ClientSession, Progress], Awaitable[T]],
) -> T:
    """Validate, open a session, run ``work`` in it, close it; every failure becomes an ApplicationError."""
    plan = await plan_connection(server_name, server, settings)  # raises before spawning or connecting
    # The stdio server's stderr goes to a file that outlives the session, so a crash can be explained.
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
        progress = Progress(stderr=stderr if plan.transport == "stdio" else None, scrubber=scrubber)
        try:
            async with open_session(plan, progress) as session:
                return await work(session, progress)
        except ApplicationError:
            raise
        except BaseExceptionGroup as group:
            raise _from_group(group, plan, progress) from group
        except Exception as exc:
            raise _classify(exc, plan, progress) from exc


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, which anyio task groups wrap failures in."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _from_group(group: BaseExceptionGroup[BaseException], plan: ConnectionPlan, progress: Progress) -> BaseException:
    """The most telling failure in a group: our own errors first, then timeouts, then the rest."""
    leaves = _leaves(group)
    for leaf in leaves:
        if isinstance(leaf, ApplicationError):
            return leaf
    failures = [leaf for leaf in leaves if isinstance(leaf, Exception)]
    if not failures:  # only cancellations: let cancellation through as such
        return next((leaf for leaf in leaves if isinstance(leaf, asyncio.CancelledError)), asyncio.CancelledError())
    timeout = next((leaf for leaf in failures if isinstance(leaf, TimeoutError)), None)
    return _classify(timeout or failures[0], plan, progress)


def _classify(exc: Exception, plan: ConnectionPlan, progress: Progress) -> ApplicationError:
    """Sort a client-side failure into MCPConfigError or MCPUnavailable, with a message naming the cause."""
    where = f"{plan.label} ({plan.transport})"
    detail = progress.stderr_note(plan.label)
    if isinstance(exc, TimeoutError):
        return unavailable_error(f"{where} did not answer within {progress.timeout:g} s while {progress.phase}.")
    if isinstance(exc, FileNotFoundError | PermissionError) and plan.transport == "stdio":
        return config_error(f"{where} could not be started: {plan.command!r} cannot be run on this worker ({exc}).")
    status = exc.response.status_code if isinstance(exc, httpx2.HTTPStatusError) else progress.http_status
    if status in (401, 403, 404, 405) or (
        isinstance(exc, MCPError) and exc.code == mcp_types.METHOD_NOT_FOUND and progress.phase == "initializing"
    ):
        answer = f"answered HTTP {status}" if status else "does not speak MCP (initialize: method not found)"
        return config_error(f"{where} {answer} while {progress.phase}; check its url and headers.")
    if isinstance(exc, MCPError):
        if status is not None:
            return unavailable_error(f"{where} answered HTTP {status} while {progress.phase}: {exc.message}")
        if exc.code == mcp_types.CONNECTION_CLOSED:
            return unavailable_error(f"{where} closed the connection while {progress.phase} (did it crash?).{detail}")
        return unavailable_error(f"{where} failed while {progress.phase}: MCP error {exc.code}: {exc.message}{detail}")
    if isinstance(exc, httpx2.HTTPStatusError):
        return unavailable_error(f"{where} answered HTTP {exc.response.status_code} while {progress.phase}.")
    if isinstance(exc, httpx2.TransportError | OSError):
        return unavailable_error(f"{where} could not be reached while {progress.phase}: {type(exc).__name__}: {exc}")
    return unavailable_error(f"{where} failed while {progress.phase}: {type(exc).__name__}: {exc}{detail}")


async def finish_cleanup_on_cancel(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` in its own task that receives at most one cancellation, and wait for its cleanup.

    Temporal cancels an activity by ``task.cancel()``, possibly more than once (a cancel request and a
    failed heartbeat, say). A second cancellation landing in the stdio transport's shielded shutdown
    would abort it and leave the server process running; here the caller's cancellations are absorbed
    until the session has closed, then the first one is re-raised.
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                continue
        if not task.cancelled():
            task.exception()  # retrieved, so asyncio does not log it: the cancellation is what counts
        raise
