"""DeerFlow's ``mcp_settings`` on ``/api/chat/stream``: the operator's servers reach the research run,
narrowed as the UI asks; every other server is left out, and the turn and the run's status say why.

The real API server on loopback, a worker of the test's own (time-skipping server, the offline
model) whose operator table holds the MCP test server, and chat turns in DeerFlow's exact shape
(../shared/deerflow-web/API.md §3: every enabled server with its definition, ``enabled_tools`` and
``add_to_agents``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from config.settings import Settings, load_settings
from server.mcp_settings import DeerFlowMCPSettings, mcp_picks
from tests.support.processes import DevServer, WorkerProcess, wait_for_worker
from tests.support.web_server import api_server, parse_sse
from workflows.contracts.research import ResearchRequest
from workflows.contracts.status import RunStatus

pytestmark = pytest.mark.timeout(120)
SCRIPT = str(Path(__file__).parent / "support" / "mcp_test_server.py")
CALC = {"transport": "stdio", "command": sys.executable, "args": [SCRIPT]}
# The operator's table: the calculator for the researcher, and a server the UI will define otherwise.
OPERATOR = {"calc": CALC, "other": {**CALC, "add_to_agents": ["researcher"]}}


def enabled(definition: dict, tools: list[str], agents: list[str]) -> dict:
    """One server as DeerFlow's settings store sends it (web/src/core/store/settings-store.ts)."""
    return {**definition, "env": {}, "enabled_tools": tools, "add_to_agents": agents}


@pytest.fixture(scope="module")
async def served(dev_server: DevServer, client: Client, tmp_path_factory: pytest.TempPathFactory,
                 ) -> AsyncIterator[tuple[str, Client]]:
    """A worker process and the API server, both with the operator's table (the feed follows a real
    server's history, which the time-skipping server does not long-poll)."""
    table = {"MCP_SERVERS": json.dumps(OPERATOR)}
    worker = WorkerProcess(dev_server.address, tmp_path_factory.mktemp("worker") / "worker.log", env=table).start()
    try:
        await wait_for_worker(client, worker.log_path)
        settings = load_settings(environ={**os.environ, **table}).model_copy(update={"web_token": None})
        async with api_server(client, settings) as url:
            yield url, client
    finally:
        worker.stop()


async def test_enabled_operator_servers_reach_the_researcher_and_others_are_said_to_be_left_out(
        served: tuple[str, Client], tmp_path: Path) -> None:
    base, client = served
    marker = tmp_path / "started"
    servers = {
        "calc": {"name": "calc", **enabled(CALC, ["add"], ["researcher"])},
        "rogue": {"name": "rogue", **enabled({"transport": "stdio", "command": "touch", "args": [str(marker)]},
                                             ["anything"], ["researcher"])},
        "other": {"name": "other", **enabled({"transport": "stdio", "command": "touch", "args": [str(marker)]},
                                             ["add"], ["researcher"])},
    }
    body = {"messages": [{"role": "user", "content": "What are the prospects of solid-state batteries?"}],
            "thread_id": "mcpThread_1", "locale": "en-US", "resources": [], "auto_accepted_plan": True,
            "enable_background_investigation": False, "max_step_num": 1, "report_style": "academic",
            "mcp_settings": {"servers": servers}}
    async with httpx.AsyncClient(timeout=100) as http:
        response = await http.post(f"{base}/api/chat/stream", json=body)
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)

    kind, notice = events[0]
    assert kind == "message_chunk" and notice["agent"] == "coordinator" and notice["finish_reason"] == "stop"
    assert "'rogue': not one of the operator's servers" in notice["content"]
    assert "'other': its command differs from the operator's definition" in notice["content"]
    assert "calc" not in notice["content"]
    called = {call["name"] for kind, data in events if kind == "tool_calls" for call in data["tool_calls"]}
    assert "mcp_calc_add" in called and "mcp_calc_echo_env" not in called, called  # enabled_tools narrowed
    assert not any(name.startswith("mcp_other") for name in called)
    answers = [data["content"] for kind, data in events if kind == "tool_call_result"]
    assert "4" in answers  # add(2, 2) ran on the operator's calculator
    assert not marker.exists()

    handle = client.get_workflow_handle("deerflow-web-mcpThread_1.1")
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    request = ResearchRequest.model_validate_json(started.data)
    assert [choice.model_dump() for choice in request.mcp_servers] == [
        {"name": "calc", "enabled_tools": ["add"], "add_to_agents": ["researcher"]}]
    status = await handle.query("status", result_type=RunStatus)
    assert any("'rogue': not one of the operator's servers" in note for note in status.notes), status.notes


def picks(servers: object, **operator: object) -> tuple[list, list]:
    settings: Settings = load_settings(environ={"DEERFLOW_CONF": "/nonexistent.yaml",
                                                "MCP_SERVERS": json.dumps(operator or OPERATOR)})
    return mcp_picks(DeerFlowMCPSettings.model_validate({"servers": servers}), settings)


def test_the_ui_narrows_the_operators_agents_and_tools_and_never_widens_them() -> None:
    chosen, ignored = picks({"calc": enabled(CALC, ["add", "leak"], ["researcher", "coder"])})
    assert [c.model_dump() for c in chosen] == [{"name": "calc", "enabled_tools": ["add", "leak"],
                                                 "add_to_agents": ["researcher"]}]
    chosen, ignored = picks({"calc": enabled(CALC, ["add"], ["coder"])})
    assert chosen == [] and ignored[0].reason == "its add_to_agents (coder) name none of the operator's (researcher)"


@pytest.mark.parametrize(("entry", "reason"), [
    ("calc", "not in DeerFlow's shape"),
    ({"transport": "carrier-pigeon"}, "not in DeerFlow's shape (transport"),
    ({**CALC, "args": ["--other"]}, "its args differs from the operator's definition"),
    ({"transport": "sse", "url": "http://127.0.0.2:9/sse"}, "its transport differs"),
])
def test_a_broken_or_different_entry_is_left_out_with_its_reason(entry: object, reason: str) -> None:
    chosen, ignored = picks({"calc": entry})
    assert chosen == [] and ignored[0].name == "calc" and ignored[0].reason.startswith(reason), ignored


def test_a_long_name_is_shown_cut() -> None:
    _, ignored = picks({"x" * 5000: enabled(CALC, [], ["researcher"])})
    assert ignored[0].name == "x" * 100 + "…" and ignored[0].reason == "not one of the operator's servers"
