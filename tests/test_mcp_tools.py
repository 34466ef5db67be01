"""The MCP activities against a real MCP server (``tests/support/mcp_test_server.py``) over every transport.

Why this way: what can go wrong lies in how the genuine SDK client spawns, talks to and tears down
a genuine server (environment, cancellation, process groups, HTTP sessions), which a mock of the
protocol would not exercise. stdio spawns the server script with this venv's python (admitted by
the allowlist through its basename); streamable HTTP and SSE serve the same tools from uvicorn
threads on 127.0.0.1. Servers are the operator's (``MCP_SERVERS``): each test registers its server
there and the activity request names it. Every guard is also checked to refuse *before* anything is
spawned or connected, by replacing the transports with recorders that fail the test when reached.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.client.stdio
import pytest
import uvicorn
from mcp import types as mcp_types
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.guards.url_guard as url_guard
import activities.mcp.session as mcp_session
from activities.mcp.calls import McpActivities
from activities.mcp.checks import CONFIG_ERROR, UNAVAILABLE, UNKNOWN_TOOL
from activities.mcp.tools import MAX_RESULT_CHARS, format_content
from config.mcp_servers import MCPServerConfig
from config.settings import load_settings
from tests.support.mcp_test_server import server as test_mcp_server
from workflows.contracts.mcp_choices import MCPServerChoice
from workflows.contracts.mcp_naming import VALID_TOOL_NAME, mcp_tool_name
from workflows.contracts.research import MCP_SETTINGS_REMOVED, ResearchRequest
from workflows.contracts.tool_activities import MCPCallRequest, MCPCallResult, MCPListRequest, MCPToolList

SERVER_SCRIPT = Path(__file__).parent / "support" / "mcp_test_server.py"
TOOLS = {"add", "echo_env", "echo_header", "fail", "leak", "slow"}
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def mcp_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The operator's settings, by env name: the default command allowlist, 127.0.0.1 allowed,
    no conf.yaml, no servers yet (``register`` adds one). No proxy may leak in from the machine
    (HTTP clients read those from the environment)."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    return {"DEERFLOW_CONF": str(tmp_path / "absent.yaml"), "DEERFLOW_MCP_ALLOW_HOSTS": "127.0.0.1"}


def activities(env: dict[str, str]) -> McpActivities:
    """The MCP activities as a worker with ``env`` builds them (secrets: its environment, as now)."""
    return McpActivities(load_settings(environ=env))


def stdio_server(**env: str) -> MCPServerConfig:
    """The test server over stdio, started by this venv's python (an absolute path)."""
    return MCPServerConfig(transport="stdio", command=sys.executable, args=[str(SERVER_SCRIPT)], env=env)


def register(env: dict[str, str], server: MCPServerConfig, server_name: str = "local") -> None:
    """Make ``server`` the operator's only MCP server, under ``server_name``."""
    env["MCP_SERVERS"] = json.dumps({server_name: server.model_dump()})


async def list_tools(
    env: dict[str, str],
    server: MCPServerConfig, server_name: str = "local", agent: str = "researcher", enabled: list[str] | None = None
) -> MCPToolList:
    register(env, server, server_name)
    request = MCPListRequest(server_name=server_name, agent=agent, enabled_tools=enabled)
    return await ActivityEnvironment().run(activities(env).mcp_list_tools, request)


async def call_tool(
    env: dict[str, str],
    server: MCPServerConfig, tool: str, server_name: str = "local", enabled: list[str] | None = None, **arguments: Any
) -> MCPCallResult:
    register(env, server, server_name)
    request = MCPCallRequest(server_name=server_name, tool=tool, arguments=arguments, enabled_tools=enabled)
    return await ActivityEnvironment().run(activities(env).mcp_call_tool, request)


async def activity_error(env: dict[str, str], server: MCPServerConfig, tool: str | None = None) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        if tool is None:
            await list_tools(env, server)
        else:
            await call_tool(env, server, tool)
    return caught.value


def process_state(pid: int) -> str:
    """'gone' once the process has exited and been reaped, else its /proc state letter."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except (ProcessLookupError, FileNotFoundError):
        return "gone"


# ---------------------------------------------------------------- transports that must not be reached


class TransportRecorder:
    """Stands in for the SDK's transports: any use means a guard let a refused server through."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, Any]] = []

    def factory(self, kind: str) -> Any:
        @asynccontextmanager
        async def opened(target: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            self.opened.append((kind, target))
            raise RuntimeError(f"{kind} transport opened for {target!r}")
            yield  # pragma: no cover

        return opened


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> TransportRecorder:
    fake = TransportRecorder()
    monkeypatch.setattr(mcp_session, "stdio_client", fake.factory("stdio"))
    monkeypatch.setattr(mcp_session, "sse_client", fake.factory("sse"))
    monkeypatch.setattr(mcp_session, "streamable_http_client", fake.factory("streamable_http"))
    return fake


# ---------------------------------------------------------------- stdio


async def test_stdio_lists_prefixed_tools_with_schemas(mcp_env: dict[str, str]) -> None:
    listing = await list_tools(mcp_env, stdio_server())

    assert listing.server_name == "local"
    by_name = {tool.name: tool for tool in listing.tools}
    assert set(by_name) == {f"mcp_local_{tool}" for tool in TOOLS}
    add = by_name["mcp_local_add"]
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object"
    assert set(add.parameters["properties"]) == {"a", "b"}
    assert add.parameters["required"] == ["a", "b"]
    assert by_name["mcp_local_fail"].parameters["type"] == "object"


async def test_stdio_call_round_trip(mcp_env: dict[str, str]) -> None:
    result = await call_tool(mcp_env, stdio_server(), "add", a=2, b=40)

    assert result == MCPCallResult(content="42", is_error=False)


async def test_stdio_child_gets_expanded_env_but_not_worker_secrets(mcp_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker-secret")  # in the process: the child must not inherit it
    mcp_env["MCP_TEST_SECRET"] = "s3cret"  # a worker variable the placeholder names
    env_file = tmp_path / "env-names"
    server = stdio_server(GREETING="hello ${MCP_TEST_SECRET}", MCP_TEST_ENV_FILE=str(env_file))

    greeting = await call_tool(mcp_env, server, "echo_env", name="GREETING")

    assert greeting.content == "hello s3cret"
    inherited = set(env_file.read_text().split()) - {"GREETING", "MCP_TEST_ENV_FILE"}
    assert "OPENAI_API_KEY" not in inherited
    assert "MCP_TEST_SECRET" not in inherited
    # PATH, HOME, LANG from us; the SDK adds its own short list of harmless ones.
    assert inherited <= {"PATH", "HOME", "LANG", "LOGNAME", "SHELL", "TERM", "USER", "LC_CTYPE"}


async def test_crashing_server_is_retryable_and_its_stderr_stays_on_the_worker(mcp_env: dict[str, str],
    caplog: pytest.LogCaptureFixture
) -> None:
    # The server prints a worker secret it was given (through its operator env) before dying.
    mcp_env["MCP_TEST_SECRET"] = "sk-stderr-secret-value"
    code = "import os, sys; print('boom: missing module', os.environ['TOKEN'], file=sys.stderr); sys.exit(3)"
    server = MCPServerConfig(command=sys.executable, args=["-c", code], env={"TOKEN": "${MCP_TEST_SECRET}"})

    with caplog.at_level(logging.WARNING):
        error = await activity_error(mcp_env, server)

    assert error.type == UNAVAILABLE
    assert not error.non_retryable
    assert "boom" not in error.message and "stderr" in error.message  # says it wrote some, not what
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "boom: missing module [redacted]" in logged
    assert "sk-stderr-secret-value" not in logged


@pytest.fixture
def quick_escalation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shorten the SDK's grace period between closing the server's stdin and SIGTERM (2 s) to save time."""
    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", 0.3)


@pytest.mark.usefixtures("quick_escalation")
async def test_cancel_during_call_stops_the_server(mcp_env: dict[str, str], tmp_path: Path) -> None:
    # Cancelled the way Temporal may do it: once by request, then again (a failed heartbeat, a
    # worker shutdown...). Later cancellations must not cut the transport's shutdown short: the
    # server ignores stdin EOF while ``slow`` blocks, so only the SIGTERM escalation that ends that
    # shutdown stops it.
    marker, pid_file = tmp_path / "slow-started", tmp_path / "server.pid"
    server = stdio_server(MCP_TEST_SLOW_MARKER=str(marker), MCP_TEST_PID_FILE=str(pid_file))
    env = ActivityEnvironment()
    register(mcp_env, server)
    request = MCPCallRequest(server_name="local", tool="slow", arguments={"seconds": 30})
    task = asyncio.ensure_future(env.run(activities(mcp_env).mcp_call_tool, request))
    deadline = time.monotonic() + 20
    while not marker.exists():  # wait until the tool is really running
        assert not task.done(), task.result()
        assert time.monotonic() < deadline, "the slow tool never started"
        await asyncio.sleep(0.05)
    pid = int(pid_file.read_text())
    activity_tasks = [
        candidate
        for candidate in asyncio.all_tasks()
        if candidate is not asyncio.current_task()
        and candidate.get_coro().__qualname__ == "McpActivities.mcp_call_tool"
    ]
    assert activity_tasks

    try:
        env.cancel()
        for _ in range(30):
            await asyncio.sleep(0.05)
            for activity_task in activity_tasks:
                activity_task.cancel()
        done, _ = await asyncio.wait({task}, timeout=8)

        assert done, "the cancelled activity did not finish"
        with pytest.raises(asyncio.CancelledError):
            task.result()
        assert process_state(pid) == "gone"
    finally:
        if process_state(pid) != "gone":
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- refusals before any I/O


@pytest.mark.parametrize(
    "command",
    [
        "bash",  # not on the allowlist
        "sh",
        "/bin/sh",  # an absolute path is judged by its basename
        "python3; rm -rf /",  # a second command smuggled in
        "python3 -c 1",  # arguments belong in args
        "/tmp/$(reboot)/python3",  # allowed basename, shell syntax in the path
        "/usr/bin/../../tmp/python3",  # allowed basename, path that is not what it looks like
        "./python",  # relative: depends on the worker's working directory
    ],
)
async def test_disallowed_command_is_refused_without_spawning(
    mcp_env: dict[str, str], recorder: TransportRecorder, command: str
) -> None:
    error = await activity_error(mcp_env, MCPServerConfig(command=command))

    assert error.type == CONFIG_ERROR
    assert error.non_retryable
    assert recorder.opened == []


async def test_allowlist_comes_from_settings(mcp_env: dict[str, str], recorder: TransportRecorder) -> None:
    mcp_env["DEERFLOW_MCP_ALLOWED_COMMANDS"] = "node, npx"

    error = await activity_error(mcp_env, stdio_server())

    assert error.type == CONFIG_ERROR
    assert "node, npx" in error.message
    assert recorder.opened == []


async def test_allowlisted_entry_with_arguments_is_still_refused(mcp_env: dict[str, str], recorder: TransportRecorder
) -> None:
    # An operator may put "uv run" on the list; the command is still one executable, never a command line.
    mcp_env["DEERFLOW_MCP_ALLOWED_COMMANDS"] = "uv run,python3"

    error = await activity_error(mcp_env, MCPServerConfig(command="uv run", args=["server.py"]))

    assert error.type == CONFIG_ERROR
    assert "args" in error.message
    assert recorder.opened == []


@pytest.mark.parametrize(
    "url", ["file://localhost/etc/passwd", "ftp://127.0.0.1/mcp", "gopher://127.0.0.1:70/", "http:///mcp"]
)
@pytest.mark.parametrize("transport", ["sse", "streamable_http"])
async def test_non_http_url_is_refused_without_connecting(mcp_env: dict[str, str],
    recorder: TransportRecorder, transport: str, url: str
) -> None:
    error = await activity_error(mcp_env, MCPServerConfig(transport=transport, url=url))  # type: ignore[arg-type]

    assert error.type == CONFIG_ERROR
    assert error.non_retryable
    assert recorder.opened == []


async def test_missing_placeholder_variable_is_named(mcp_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch, recorder: TransportRecorder
) -> None:
    monkeypatch.delenv("MCP_TEST_ABSENT_TOKEN", raising=False)
    server = MCPServerConfig(
        transport="streamable_http",
        url="http://127.0.0.1:9/mcp",
        headers={"Authorization": "Bearer ${MCP_TEST_ABSENT_TOKEN}"},
    )

    error = await activity_error(mcp_env, server)

    assert error.type == CONFIG_ERROR
    assert "MCP_TEST_ABSENT_TOKEN" in error.message
    assert recorder.opened == []


# ---------------------------------------------------------------- streamable HTTP and SSE


class HttpServer:
    """The test MCP server's tools over HTTP, served by uvicorn in a thread on a free loopback port."""

    def __init__(self, transport: str, host: str = "127.0.0.1") -> None:
        self.transport = transport
        app = (test_mcp_server.sse_app if transport == "sse" else test_mcp_server.streamable_http_app)(host=host)
        self.socket = socket.create_server((host, 0))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=0))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}{'/sse' if self.transport == 'sse' else '/mcp'}"

    def __enter__(self) -> HttpServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)
        self.socket.close()

    def config(self, **fields: Any) -> MCPServerConfig:
        return MCPServerConfig(transport=self.transport, url=self.url, **fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=["streamable_http", "sse"])
def http_server(request: pytest.FixtureRequest) -> Iterator[HttpServer]:
    with HttpServer(request.param) as server:
        yield server


async def test_http_round_trip_with_expanded_header(mcp_env: dict[str, str], http_server: HttpServer) -> None:
    mcp_env["MCP_TEST_TOKEN"] = "t0ken"
    server = http_server.config(headers={"Authorization": "Bearer ${MCP_TEST_TOKEN}"})

    listing = await list_tools(mcp_env, server, server_name="web")
    added = await call_tool(mcp_env, server, "add", server_name="web", a=1, b=2)
    header = await call_tool(mcp_env, server, "echo_header", server_name="web", name="Authorization")

    assert {tool.name for tool in listing.tools} == {f"mcp_web_{tool}" for tool in TOOLS}
    assert added == MCPCallResult(content="3")
    assert header.content == "Bearer t0ken"


async def test_tool_error_is_a_result_the_agent_reads(mcp_env: dict[str, str], http_server: HttpServer) -> None:
    result = await call_tool(mcp_env, http_server.config(), "fail", server_name="web")

    assert result.is_error
    assert "the fail tool always fails" in result.content


async def test_enabled_tools_filters_listing_and_calls(mcp_env: dict[str, str], http_server: HttpServer) -> None:
    server = http_server.config(enabled_tools=["add", "fail"])

    listing = await list_tools(mcp_env, server, server_name="web")
    error = await activity_error(mcp_env, server, tool="slow")

    assert [tool.name for tool in listing.tools] == ["mcp_web_add", "mcp_web_fail"]
    assert error.type == UNKNOWN_TOOL
    assert error.non_retryable


async def test_unknown_tool_is_not_retryable(mcp_env: dict[str, str], http_server: HttpServer) -> None:
    error = await activity_error(mcp_env, http_server.config(), tool="no_such_tool")

    assert error.type == UNKNOWN_TOOL
    assert error.non_retryable
    assert "no_such_tool" in error.message


async def test_exposed_name_is_accepted_too(mcp_env: dict[str, str], http_server: HttpServer) -> None:
    result = await call_tool(mcp_env, http_server.config(), mcp_tool_name("web", "add"), server_name="web", a=20, b=22)

    assert result.content == "42"


async def test_call_timeout_is_retryable(
    mcp_env: dict[str, str], http_server: HttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_session, "CALL_TIMEOUT_SECONDS", 0.3)
    register(mcp_env, http_server.config(), "web")
    request = MCPCallRequest(server_name="web", tool="slow", arguments={"seconds": 2})

    started = time.monotonic()
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(activities(mcp_env).mcp_call_tool, request)

    assert caught.value.type == UNAVAILABLE
    assert not caught.value.non_retryable
    assert "0.3 s" in caught.value.message
    assert time.monotonic() - started < 2


async def test_wrong_http_path_is_a_config_error(mcp_env: dict[str, str], http_server: HttpServer) -> None:
    server = http_server.config()
    server.url = server.url.rsplit("/", 1)[0] + "/not-mcp"

    error = await activity_error(mcp_env, server)

    assert error.type == CONFIG_ERROR
    assert "404" in error.message


@pytest.mark.parametrize("transport", ["sse", "streamable_http"])
async def test_connection_refused_is_retryable(mcp_env: dict[str, str], transport: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    server = MCPServerConfig(transport=transport, url=f"http://127.0.0.1:{port}/mcp")  # type: ignore[arg-type]

    error = await activity_error(mcp_env, server)

    assert error.type == UNAVAILABLE
    assert not error.non_retryable


# ---------------------------------------------------------------- pure helpers


def test_tool_names_are_valid_and_distinct() -> None:
    long_a = "a" * 80
    names = [
        mcp_tool_name("files", "read"),
        mcp_tool_name("my server", "fs.read/file"),
        mcp_tool_name("s", long_a + "1"),
        mcp_tool_name("s", long_a + "2"),
    ]

    assert names[0] == "mcp_files_read"
    assert names[1] == "mcp_my_server_fs_read_file"
    assert names[2] != names[3]
    assert all(VALID_TOOL_NAME.match(name) for name in names)
    assert mcp_tool_name("s", long_a + "1") == names[2]  # deterministic, so the workflow can route


def test_result_content_is_joined_capped_and_binary_described() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="first"),
            mcp_types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
            mcp_types.TextContent(type="text", text="x" * (2 * MAX_RESULT_CHARS)),
        ]
    )

    text = format_content(result)

    assert text.startswith("first\n[image: image/png")
    assert "aGVsbG8=" not in text
    assert len(text) <= MAX_RESULT_CHARS
    assert "truncated" in text[-60:]


# ---------------------------------------------------------------- the operator's table, the request's choice


def test_request_rejects_old_mcp_settings_with_directions() -> None:
    definition = {"servers": {"x": {"command": "/usr/bin/python3", "args": ["-c", "print(1)"]}}}

    with pytest.raises(ValidationError) as caught:
        ResearchRequest.model_validate({"question": "q", "mcp_settings": definition})

    assert MCP_SETTINGS_REMOVED in str(caught.value)
    assert "mcp_servers" in MCP_SETTINGS_REMOVED and "MCP_SERVERS" in MCP_SETTINGS_REMOVED
    # What older clients send for "no MCP" still starts a run.
    assert ResearchRequest.model_validate({"question": "q", "mcp_settings": None}).mcp_servers == []


def test_request_picks_servers_by_name_only() -> None:
    request = ResearchRequest(question="q", mcp_servers=["github", {"name": "files", "enabled_tools": ["read"]}])

    expected = [MCPServerChoice(name="github"), MCPServerChoice(name="files", enabled_tools=["read"])]
    assert request.mcp_servers == expected
    for bad in (
        [{"name": "x", "command": "python3"}],  # a definition, not a choice
        [{"name": "x", "url": "http://169.254.169.254/"}],
        ["a b"],
        ["x", "x"],
    ):
        with pytest.raises(ValidationError):
            ResearchRequest(question="q", mcp_servers=bad)


def test_servers_come_from_conf_yaml(tmp_path: Path) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text(
        "MCP_SERVERS:\n  calc:\n    command: python3\n    args: [server.py]\n"
        "    headers: {Authorization: 'Bearer ${CALC_TOKEN}'}\n    add_to_agents: [researcher, coder]\n"
    )
    server = load_settings(environ={}, conf_path=conf).mcp_servers["calc"]

    assert server.args == ["server.py"]
    assert server.headers == {"Authorization": "Bearer ${CALC_TOKEN}"}  # expanded only when used
    assert server.add_to_agents == ["researcher", "coder"]


async def test_unknown_server_name_is_refused(mcp_env: dict[str, str], recorder: TransportRecorder) -> None:
    register(mcp_env, stdio_server(), "calc")

    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(activities(mcp_env).mcp_call_tool,
                                        MCPCallRequest(server_name="other", tool="add"))

    assert caught.value.type == CONFIG_ERROR
    assert caught.value.non_retryable
    assert "'other' is not configured" in caught.value.message and "calc" in caught.value.message
    assert recorder.opened == []


async def test_server_not_added_to_the_agent_lists_nothing(
    mcp_env: dict[str, str], recorder: TransportRecorder
) -> None:
    listing = await list_tools(mcp_env, stdio_server(), agent="coder")

    assert listing.tools == []
    assert recorder.opened == []


async def test_request_can_only_narrow_the_operators_tools(mcp_env: dict[str, str], http_server: HttpServer) -> None:
    server = http_server.config(enabled_tools=["add", "fail"])

    listing = await list_tools(mcp_env, server, server_name="web", enabled=["add", "slow"])
    widened = await activity_error_for_call(mcp_env, server, "slow", enabled=["add", "slow"])
    narrowed = await activity_error_for_call(mcp_env, server, "fail", enabled=["add"])

    assert [tool.name for tool in listing.tools] == ["mcp_web_add"]
    assert widened.type == UNKNOWN_TOOL
    assert narrowed.type == UNKNOWN_TOOL


async def activity_error_for_call(
    env: dict[str, str], server: MCPServerConfig, tool: str, enabled: list[str]
) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await call_tool(env, server, tool, server_name="web", enabled=enabled)
    return caught.value


# ---------------------------------------------------------------- the address guard on MCP URLs


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("metadata.internal", ["169.254.169.254"]),
        ("intranet.example", ["10.1.2.3"]),
        ("mixed.example", ["93.184.215.14", "192.168.0.7"]),  # one private address is enough
        ("169.254.169.254", []),  # a literal: no lookup at all
    ],
)
@pytest.mark.parametrize("transport", ["sse", "streamable_http"])
async def test_non_public_mcp_url_is_refused_without_connecting(mcp_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch, recorder: TransportRecorder, transport: str, host: str, addresses: list[str]
) -> None:
    async def resolve(name: str, port: int) -> list[str]:
        assert name == host
        return addresses

    monkeypatch.setattr(url_guard, "resolve_host", resolve)
    server = MCPServerConfig(transport=transport, url=f"http://{host}/mcp")  # type: ignore[arg-type]

    error = await activity_error(mcp_env, server)

    assert error.type == CONFIG_ERROR
    assert error.non_retryable
    assert "DEERFLOW_MCP_ALLOW_HOSTS" in error.message
    assert recorder.opened == []


async def test_loopback_mcp_server_is_refused_live_unless_allow_listed(mcp_env: dict[str, str]) -> None:
    with HttpServer("streamable_http", host="127.0.0.2") as server:
        refused = await activity_error(mcp_env, server.config())
        mcp_env["DEERFLOW_MCP_ALLOW_HOSTS"] = "127.0.0.0/8"
        allowed = await call_tool(mcp_env, server.config(), "add", a=1, b=1)

    assert refused.type == CONFIG_ERROR
    assert "loopback" in refused.message
    assert allowed.content == "2"
