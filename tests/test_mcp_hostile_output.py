"""An MCP server's output holding lone surrogates or bytes that are not UTF-8 (issue #42).

Through the genuine SDK client over stdio (the researcher's path), against a server that writes what
careless ones do (``tests/support/hostile_mcp_server.py``): each lone surrogate reads as U+FFFD, a
pair written as two escapes as its character, and broken bytes as U+FFFD; over streamable HTTP too,
in JSON bodies and in events. Before, the strict parser refused the whole message: over stdio the
session dropped it, so every listing and call waited out its deadline on every attempt, and the
tool's output never reached the agent. In a run on the
time-skipping server, the researcher reads the output, the run reports, and its history (as JSON)
replays.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.testing import ActivityEnvironment

import activities.mcp.session as mcp_session
from activities.mcp.calls import McpActivities
from config.settings import load_settings
from offline.model_server import FakeModelServer
from runtime.embedded import free_port
from runtime.replay import replayer
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.research import Outcome
from workflows.contracts.tool_activities import MCPCallRequest, MCPListRequest

SERVER_SCRIPT = Path(__file__).parent / "support" / "hostile_mcp_server.py"
# What HOSTILE reads as: each lone surrogate U+FFFD, the pair written as two escapes its emoji.
MENDED = "lone \ufffd high, lone \ufffd low, cut emoji \ufffd|, whole pair \U0001f600 end"


@pytest.fixture(autouse=True)
def prompt_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deadlines short enough that a dropped answer fails the test in seconds (not 20 s a listing and
    60 s a call, on each attempt), long enough for a local process on a loaded machine."""
    monkeypatch.setattr(mcp_session, "LIST_TIMEOUT_SECONDS", 10.0)
    monkeypatch.setattr(mcp_session, "CALL_TIMEOUT_SECONDS", 10.0)


def servers(mode: str) -> str:
    """The operator's MCP_SERVERS: the hostile server over stdio, writing ``mode``."""
    return json.dumps({"hostile": {"transport": "stdio", "command": sys.executable,
                                   "args": [str(SERVER_SCRIPT), mode]}})


@contextlib.contextmanager
def http_server(mode: str, answers: str) -> Iterator[str]:
    """The hostile server over streamable HTTP on loopback, answering in JSON bodies or events; its URL."""
    port = free_port()
    events = ["--events"] if answers == "events" else []
    process = subprocess.Popen([sys.executable, str(SERVER_SCRIPT), mode, "--port", str(port), *events])
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "the hostile server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def assert_read(text: str, mode: str) -> None:
    """``text`` holds the hostile output as it must read: no surrogate left, and carried as UTF-8."""
    text.encode("utf-8")  # raises on a lone surrogate
    if mode == "escapes":
        assert MENDED in text
    else:  # each byte of an encoded surrogate, and the stray 0xFF, is one U+FFFD
        assert "lone \ufffd\ufffd\ufffd high" in text and text.endswith("end \ufffd")


async def read_hostile_output(mode: str, env: dict[str, str]) -> None:
    mcp = McpActivities(load_settings(environ=env))
    listed = await ActivityEnvironment().run(mcp.mcp_list_tools, MCPListRequest(server_name="hostile",
                                                                                 agent="researcher"))
    assert [tool.name for tool in listed.tools] == ["mcp_hostile_lookup"]
    assert_read(listed.tools[0].description, mode)
    listed.model_dump_json()  # the listing is a payload
    called = await ActivityEnvironment().run(mcp.mcp_call_tool, MCPCallRequest(
        server_name="hostile", tool="lookup", arguments={"topic": "batteries"}))
    assert not called.is_error and called.content.startswith("Found: ")
    assert_read(called.content, mode)
    called.model_dump_json()


@pytest.mark.parametrize("mode", ["escapes", "bytes"])
async def test_the_activities_read_hostile_output_over_stdio_at_once(mode: str, tmp_path: Path) -> None:
    await read_hostile_output(mode, {"DEERFLOW_CONF": str(tmp_path / "absent.yaml"), "MCP_SERVERS": servers(mode)})


@pytest.mark.parametrize("answers", ["json", "events"])
@pytest.mark.parametrize("mode", ["escapes", "bytes"])
async def test_the_activities_read_hostile_output_over_http_at_once(mode: str, answers: str, tmp_path: Path) -> None:
    """Over streamable HTTP the SDK turned the refused answer into a parse error: the listing failed
    (retried, then the run went on without the server's tools) and no call got through."""
    with http_server(mode, answers) as url:
        await read_hostile_output(mode, {
            "DEERFLOW_CONF": str(tmp_path / "absent.yaml"), "DEERFLOW_MCP_ALLOW_HOSTS": "127.0.0.1",
            "MCP_SERVERS": json.dumps({"hostile": {"transport": "streamable_http", "url": url}})})


@pytest.mark.parametrize("mode", ["escapes", "bytes"])
async def test_a_run_reads_hostile_mcp_output_reports_and_replays(
    mode: str, model_server: FakeModelServer, provider_env: dict[str, str], worker_with: WorkerWith,
) -> None:
    async with worker_with(settings_with(provider_env, MCP_SERVERS=servers(mode))) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=1, mcp_servers=["hostile"])
        result = await handle.result()
        history = await handle.fetch_history()
    assert result.outcome is Outcome.REPORT and result.report
    answers = [m["content"] for body in model_server.requests_for("researcher") for m in body["messages"]
               if m["role"] == "tool" and str(m["content"]).startswith("Found: ")]
    assert answers, "the MCP tool's output never reached the researcher"
    assert_read(answers[0], mode)
    as_json = WorkflowHistory.from_json(history.workflow_id, history.to_json())
    replayed = await replayer(client.data_converter).replay_workflow(as_json, raise_on_replay_failure=False)
    assert replayed.replay_failure is None
