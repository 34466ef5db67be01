"""What the MCP activities (``activities/mcp/calls.py``) do: list a server's tools, call one.

Why it is built this way:

* Each activity opens its own client session (stdio: spawn the command; sse/streamable_http:
  connect to the URL), initializes, does one thing and closes. No session outlives an activity, so
  nothing is shared between workers or leaks across retries, and the workflow records each listing
  in history: replay never needs the live server.
* Servers are the operator's (``MCP_SERVERS``, config/mcp_servers.py): the workflow passes only a
  server name, the agent and a narrower tool list, and the definition is looked up here, so no
  command, URL, env or header value enters history. An unknown name is ``MCPConfigError``.
* The definition is still checked before anything is spawned or connected, since a typo in it should
  not run something else: a stdio ``command`` must be on ``DEERFLOW_MCP_ALLOWED_COMMANDS`` (an absolute
  path is judged by its basename), contain no shell metacharacters, and is run without a shell; URLs
  pass the crawler's address guard (public addresses only, unless in ``DEERFLOW_MCP_ALLOW_HOSTS``). A
  refusal is ``MCPConfigError`` (non-retryable): no retry can fix it.
* Secrets stay on the worker: ``env`` and ``headers`` values may be ``${VAR}`` placeholders, expanded
  here from the worker's environment. The stdio child gets a minimal environment (PATH, HOME, LANG,
  plus the MCP SDK's own short safe list: LOGNAME, SHELL, TERM, USER) and the configured ``env``,
  never the worker's API keys. A server's stderr never leaves the worker: a failure says how much it
  wrote, and its scrubbed tail goes to the worker's log (the scrub interceptor cleans the rest).
* Failures are sorted for the retry policy: the server's own tool errors (``isError``, argument
  errors) are a normal ``MCPCallResult(is_error=True)`` the agent reads and can act on; an unknown or
  disabled tool is ``MCPUnknownTool`` (non-retryable); a server that cannot be started or reached,
  crashes or does not answer in time is ``MCPUnavailable`` (retryable).
* A stdio child must not outlive its activity. The SDK's transport stops it (close stdin, SIGTERM,
  SIGKILL to its process group) in a shielded block, but a second native ``task.cancel()`` (Temporal
  can cancel an activity task more than once) would interrupt that block; ``_finish_cleanup_on_cancel``
  makes the session's own task see exactly one cancellation and waits for its cleanup.
* Results are capped (descriptions ~1,000 chars, tool output ~20,000) because both enter workflow
  history and the model's context.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
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
from activities.guards.url_guard import HostNotFound, UrlRefused, validate_url
from config.mcp_servers import MCPServerConfig, MissingVariable, expand_placeholders
from config.settings import Settings
from workflows.mcp_naming import mcp_tool_name
from workflows.models import MCPCallRequest, MCPCallResult, MCPListRequest, MCPToolList, ToolSpec

CONFIG_ERROR = "MCPConfigError"
UNAVAILABLE = "MCPUnavailable"
UNKNOWN_TOOL = "MCPUnknownTool"

CONNECT_TIMEOUT_SECONDS = 20.0  # spawn or connect, plus the initialize handshake
LIST_TIMEOUT_SECONDS = 20.0  # every page of tools/list together
CALL_TIMEOUT_SECONDS = 60.0  # one tools/call
# Idle time allowed on an HTTP response stream; the timeouts above bound the whole exchange.
HTTP_READ_TIMEOUT_SECONDS = CALL_TIMEOUT_SECONDS + 30.0

MAX_DESCRIPTION_CHARS = 1_000
MAX_RESULT_CHARS = 20_000
MAX_LIST_PAGES = 50  # a server whose cursor never ends cannot keep the activity busy
STDERR_TAIL_CHARS = 1_000

CHILD_ENV_VARS = ("PATH", "HOME", "LANG")  # what a stdio server inherits from the worker

# A bare executable name, or an absolute path of plain segments. Anything else (spaces, ;, |, &, $,
# quotes, globs, redirections, newlines...) is refused outright rather than escaped: no shell runs
# the command, so such a value is either a mistake or an attempt to smuggle a second command in.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_SAFE_PATH = re.compile(r"^(/[A-Za-z0-9_.+-]+)+$")

T = TypeVar("T")


# ---------------------------------------------------------------- errors


def config_error(message: str) -> ApplicationError:
    """The server configuration is refused or broken: only a human can fix it, so no retry."""
    return ApplicationError(message, type=CONFIG_ERROR, non_retryable=True)


def unavailable_error(message: str) -> ApplicationError:
    """The server could not be started, reached or heard from in time: Temporal's backoff retries it."""
    return ApplicationError(message, type=UNAVAILABLE)


def unknown_tool_error(message: str) -> ApplicationError:
    """The model asked for a tool the server does not offer (or that is not enabled): retrying cannot help."""
    return ApplicationError(message, type=UNKNOWN_TOOL, non_retryable=True)


# ---------------------------------------------------------------- validation (before any I/O)


def check_command(command: str | None, allowed: list[str]) -> str:
    """The stdio ``command`` if the allowlist admits it; ``MCPConfigError`` otherwise.

    An absolute path is admitted by its basename (``/usr/bin/python3`` as ``python3``); a relative
    path is refused because what it runs depends on the worker's working directory.
    """
    if not command:
        raise config_error("An MCP server with transport 'stdio' needs a 'command'.")
    if "/" in command:
        if not _SAFE_PATH.match(command) or os.path.normpath(command) != command:
            raise config_error(
                f"MCP command {command!r} is refused: give an executable name or a plain absolute path "
                "(no shell metacharacters, no relative or '..' segments)."
            )
        name = os.path.basename(command)
    else:
        if not _SAFE_NAME.match(command):
            raise config_error(
                f"MCP command {command!r} is refused: it contains characters a shell would interpret; "
                "put arguments in 'args'."
            )
        name = command
    if name not in allowed:
        raise config_error(
            f"MCP command {command!r} is not allowed on this worker (allowed: {', '.join(allowed) or 'none'}; "
            "set DEERFLOW_MCP_ALLOWED_COMMANDS to change the list)."
        )
    return command


def check_args(args: list[str]) -> list[str]:
    """Arguments pass to the executable verbatim (no shell); only NUL bytes cannot be passed at all."""
    if any("\0" in arg for arg in args):
        raise config_error("MCP server arguments must not contain NUL bytes.")
    return args


async def check_url(url: str | None, transport: str, allow_hosts: list[str]) -> str:
    """An http(s) URL whose host resolves only to public addresses (or is allow-listed).

    The crawler's guard, so an MCP URL cannot reach the metadata service, the worker's loopback or
    the private network unless the operator lists the host in ``DEERFLOW_MCP_ALLOW_HOSTS``.
    """
    if not url:
        raise config_error(f"An MCP server with transport {transport!r} needs a 'url'.")
    try:
        await validate_url(url, allow_hosts)
    except UrlRefused as exc:
        raise config_error(f"MCP server URL refused ({exc}); DEERFLOW_MCP_ALLOW_HOSTS can allow the host.") from exc
    except HostNotFound as exc:
        make = unavailable_error if exc.transient else config_error
        raise make(f"MCP server URL {url!r}: {exc}") from exc
    return url


def expand(values: dict[str, str], what: str) -> dict[str, str]:
    """The operator's ``${VAR}`` placeholders filled in; a missing variable is a config error."""
    try:
        return expand_placeholders(values)
    except MissingVariable as exc:
        raise config_error(f"MCP {what} {exc}") from exc


def check_env(env: dict[str, str]) -> dict[str, str]:
    """Names and values that an environment can hold."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise config_error(f"MCP env entry {name!r} is not a valid environment variable.")
    return env


def check_headers(headers: dict[str, str]) -> dict[str, str]:
    """No line breaks: a header value must not be able to start another header."""
    for name, value in headers.items():
        if not name or any(char in name + value for char in "\r\n\0"):
            raise config_error(f"MCP header {name!r} contains a line break or NUL byte.")
    return headers


def child_environment(configured: dict[str, str]) -> dict[str, str]:
    """The stdio server's environment: a few harmless worker variables plus what was configured."""
    base = {name: os.environ[name] for name in CHILD_ENV_VARS if os.environ.get(name)}
    return base | configured


@dataclass(frozen=True)
class _Plan:
    """A validated way to reach one server; building it is all the checking, and does no I/O."""

    server_name: str
    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """How error messages name the server."""
        return f"MCP server {self.server_name!r}"


def operator_server(server_name: str, settings: Settings) -> MCPServerConfig:
    """The operator's definition of ``server_name``; naming any other server is a config error."""
    server = settings.mcp_servers.get(server_name)
    if server is None:
        known = ", ".join(sorted(settings.mcp_servers)) or "none"
        raise config_error(
            f"MCP server {server_name!r} is not configured on this worker (configured: {known}; "
            "the operator defines servers in MCP_SERVERS)."
        )
    return server


async def plan_connection(server_name: str, server: MCPServerConfig, settings: Settings) -> _Plan:
    """Check a server configuration completely, before anything is spawned or connected."""
    if server.transport == "stdio":
        command = check_command(server.command, settings.mcp_allowed_commands)
        args = check_args(list(server.args))
        env = check_env(expand(server.env, "env entry"))
        return _Plan(server_name, "stdio", command=command, args=tuple(args), env=tuple(env.items()))
    url = await check_url(server.url, server.transport, settings.mcp_allow_hosts)
    headers = check_headers(expand(server.headers, "header"))
    return _Plan(server_name, server.transport, url=url, headers=tuple(headers.items()))


# ---------------------------------------------------------------- sessions


_NO_SECRETS = SecretScrubber(())


@dataclass
class _Progress:
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
async def _open_session(plan: _Plan, progress: _Progress) -> AsyncIterator[ClientSession]:
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
                command=plan.command, args=list(plan.args), env=child_environment(dict(plan.env))
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
        session = await stack.enter_async_context(ClientSession(*streams))
        with progress.step("initializing", CONNECT_TIMEOUT_SECONDS):
            await session.initialize()
        yield session


async def _with_session(
    server_name: str,
    server: MCPServerConfig,
    settings: Settings,
    scrubber: SecretScrubber,
    work: Callable[[ClientSession, _Progress], Awaitable[T]],
) -> T:
    """Validate, open a session, run ``work`` in it, close it; every failure becomes an ApplicationError."""
    plan = await plan_connection(server_name, server, settings)  # raises before spawning or connecting
    # The stdio server's stderr goes to a file that outlives the session, so a crash can be explained.
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
        progress = _Progress(stderr=stderr if plan.transport == "stdio" else None, scrubber=scrubber)
        try:
            async with _open_session(plan, progress) as session:
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


def _from_group(group: BaseExceptionGroup[BaseException], plan: _Plan, progress: _Progress) -> BaseException:
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


def _classify(exc: Exception, plan: _Plan, progress: _Progress) -> ApplicationError:
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


async def _finish_cleanup_on_cancel(work: Coroutine[Any, Any, T]) -> T:
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


# ---------------------------------------------------------------- listing


def tool_spec(server_name: str, tool: mcp_types.Tool) -> ToolSpec:
    """What the model sees of one MCP tool: prefixed name, capped description, an object schema."""
    description = (tool.description or tool.title or "").strip()
    if not description:
        description = f"The {tool.name!r} tool of MCP server {server_name!r}."
    return ToolSpec(
        name=mcp_tool_name(server_name, tool.name),
        description=cap_with_count(description, MAX_DESCRIPTION_CHARS),
        parameters=object_schema(tool.input_schema),
    )


def object_schema(schema: Any) -> dict[str, Any]:
    """``schema`` as an OpenAI function-parameters schema: a JSON object schema with ``properties``."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return {"type": "object", "properties": {}}
    return {"type": "object", "properties": {}, **schema}


async def _list_all_tools(session: ClientSession, progress: _Progress) -> list[mcp_types.Tool]:
    """Every tool the server lists, all pages; a server without tools support lists none."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    with progress.step("listing tools", LIST_TIMEOUT_SECONDS):
        for _ in range(MAX_LIST_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                page = await session.list_tools(params=params)
            except MCPError as exc:
                if exc.code == mcp_types.METHOD_NOT_FOUND:
                    return []
                raise
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
    return tools


def _enabled(
    tools: list[mcp_types.Tool], operator: list[str] | None, requested: list[str] | None
) -> list[mcp_types.Tool]:
    """The tools both the operator's and the request's ``enabled_tools`` admit (None admits all).

    The request can only narrow: a tool it names that the operator did not enable stays out.
    """
    for allowed in (operator, requested):
        if allowed is not None:
            tools = [tool for tool in tools if tool.name in set(allowed)]
    return tools


# ---------------------------------------------------------------- calling


def resolve_tool(server_name: str, requested: str, tools: list[mcp_types.Tool]) -> str:
    """The server's own name for ``requested``: the original name, or else its ``mcp_...`` exposed name."""
    names = [tool.name for tool in tools]
    if requested in names:
        return requested
    for name in names:
        if mcp_tool_name(server_name, name) == requested:
            return name
    raise unknown_tool_error(
        f"MCP server {server_name!r} has no enabled tool {requested!r} (enabled: {', '.join(names) or 'none'})."
    )


def format_content(result: mcp_types.CallToolResult) -> str:
    """The result as text for the model: text joined, other content as short placeholders, capped."""
    parts = [_content_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(part for part in parts if part)
    if not text:
        return "(the tool returned no content)"
    return cap_with_count(text, MAX_RESULT_CHARS)


def _content_text(block: Any) -> str:
    """One content block as text; binary content is described, not included."""
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, about {len(block.data) * 3 // 4} bytes, not shown]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link: {block.uri}{f' ({block.name})' if block.name else ''}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return f"[resource: {resource.uri}]\n{resource.text}"
        return f"[resource: {resource.uri}, {resource.mime_type or 'binary'}, not shown]"
    return f"[{getattr(block, 'type', 'unknown')} content, not shown]"


def cap_with_count(text: str, limit: int) -> str:
    """At most ``limit`` characters, a cut marked with how much is missing, so the model knows the
    tool said more (unlike search's ``cap_text``, whose snippets need no count)."""
    if len(text) <= limit:
        return text
    marker = f"\u2026 [truncated {len(text) - limit} characters]"
    return text[: max(limit - len(marker), 0)].rstrip() + marker


async def list_tools(request: MCPListRequest, settings: Settings, scrubber: SecretScrubber) -> MCPToolList:
    """The server's tools as ToolSpecs named ``mcp_<server>_<tool>``, filtered by ``enabled_tools``.

    None when the operator did not add the server to ``request.agent`` (DeerFlow's ``add_to_agents``),
    decided here because the workflow does not see the operator's table.
    """
    server = operator_server(request.server_name, settings)
    if request.agent not in server.add_to_agents:
        return MCPToolList(server_name=request.server_name)

    async def work(session: ClientSession, progress: _Progress) -> MCPToolList:
        specs: dict[str, ToolSpec] = {}
        listed = await _list_all_tools(session, progress)
        for tool in _enabled(listed, server.enabled_tools, request.enabled_tools):
            spec = tool_spec(request.server_name, tool)
            if spec.name in specs:
                activity.logger.warning(
                    "MCP server %r: tool %r shares the name %s with another tool; keeping the first",
                    request.server_name,
                    tool.name,
                    spec.name,
                )
                continue
            specs[spec.name] = spec
        return MCPToolList(server_name=request.server_name, tools=list(specs.values()))

    session = _with_session(request.server_name, server, settings, scrubber, work)
    return await _finish_cleanup_on_cancel(session)


async def call_tool(request: MCPCallRequest, settings: Settings, scrubber: SecretScrubber) -> MCPCallResult:
    """Call one tool (``request.tool``: its original name); the server's tool errors come back as is_error."""
    server = operator_server(request.server_name, settings)

    async def work(session: ClientSession, progress: _Progress) -> MCPCallResult:
        tools = _enabled(await _list_all_tools(session, progress), server.enabled_tools, request.enabled_tools)
        name = resolve_tool(request.server_name, request.tool, tools)
        with progress.step(f"calling tool {name!r}", CALL_TIMEOUT_SECONDS):
            try:
                result = await session.call_tool(name, request.arguments)
            except MCPError as exc:
                if exc.code in (mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT):
                    raise
                # The server rejected this call (bad arguments, internal error): the agent can read
                # that and try differently; retrying the identical call would not help.
                return MCPCallResult(
                    content=cap_with_count(f"MCP error {exc.code}: {exc.message}", MAX_RESULT_CHARS), is_error=True
                )
            except RuntimeError as exc:
                # The SDK's check of structured output against the tool's declared schema failed.
                return MCPCallResult(content=cap_with_count(str(exc), MAX_RESULT_CHARS), is_error=True)
        return MCPCallResult(content=format_content(result), is_error=bool(result.is_error))

    session = _with_session(request.server_name, server, settings, scrubber, work)
    return await _finish_cleanup_on_cancel(session)
