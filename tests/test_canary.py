"""Acceptance test of issue #8: a run with canary secrets leaves none of them anywhere.

Every secret the worker is configured with is a canary (``sk-CANARY-...``), and everything the run
touches tries to leak one: the search engine's snippets and a crawled page quote them (as a page
reflecting a leaked credential would), the operator's MCP server (given a canary through its
``${VAR}`` env) crashes once printing its environment to stderr and then fails quoting it, and the
coder's Python prints whatever environment it can see. Then every place text goes is searched:
the full history, the blob store, the logs, captured output, the result and every request the
model received. Removing the scrub interceptor makes this test fail.
"""

from __future__ import annotations

import base64
import json
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

import offline.step_agents as step_agents
from config.settings import Settings
from offline.model_server import FakeModelServer
from offline.search_server import FakeSearchServer
from runtime.converter import blob_root
from tests.support.fake_http import FakeHTTPServer, Reply, Seen
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.research import Outcome

CANARY = "sk-CANARY-"
SECRETS = {
    name: f"{CANARY}{name.lower().replace('_', '-')}-7f3a9c51"
    for name in ("OPENAI_API_KEY", "TAVILY_API_KEY", "BRAVE_SEARCH_API_KEY", "SERPER_API_KEY", "RAGFLOW_API_KEY",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MCP_CANARY_TOKEN")
}
SERVER_SCRIPT = Path(__file__).parent / "support" / "mcp_test_server.py"
# The coder's program: print every environment value it can reach (STATS_CODE is str.format'ed).
LEAKY_CODE = """
import os
print("environment:", " ".join(os.environ.values()))
for path in ("/proc/1/environ", f"/proc/{os.getppid()}/environ"):
    try:
        print(path, open(path, "rb").read(4000))
    except OSError as exc:
        print(path, exc)
print("| Findings | 1 |")
""".replace("{os.getppid()}", "{{os.getppid()}}")


def readable(history_json: str) -> str:
    """The history with every payload decoded (the JSON form holds them base64-encoded)."""
    parts = [history_json]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("data"), str) and "metadata" in node:
                parts.append(base64.b64decode(node["data"]).decode("utf-8", "replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(history_json))
    return "\n".join(parts)


@pytest.fixture
async def leaky_world(
    worker_with: WorkerWith, provider_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> AsyncIterator[tuple[Client, FakeHTTPServer]]:
    """Canary secrets, a leaking site and search engine, a leaking operator MCP server and coder,
    and a worker holding the secrets."""

    def page(seen: Seen) -> Reply:
        body = "".join(f"<p>Paragraph {n}: heat pumps. Debug token {SECRETS['OPENAI_API_KEY']}.</p>" for n in range(20))
        return Reply(body=f"<html><head><title>Heat pumps</title></head><body><article>{body}</article></body></html>")

    mcp_server = {
        "transport": "stdio", "command": sys.executable, "args": [str(SERVER_SCRIPT)], "enabled_tools": ["leak"],
        "env": {"LEAKY_TOKEN": "${MCP_CANARY_TOKEN}", "MCP_TEST_CRASH_MARKER": str(tmp_path / "crashed")},
    }
    with FakeHTTPServer(page) as site:
        corpus = tmp_path / "corpus.json"
        corpus.write_text(json.dumps([
            # On the run's question: the offline search answers only with pages about it.
            {"title": f"Solid-state battery page {n}", "url": f"{site.base_url}/heat-pump-{n}",
             "content": f"Solid-state batteries for electric vehicles. Leaked: {SECRETS['TAVILY_API_KEY']}",
             "published_date": "2026-01-01"}
            for n in range(2)
        ]))
        with FakeSearchServer(corpus_path=corpus, api_key=SECRETS["TAVILY_API_KEY"]) as engine:
            for name, value in SECRETS.items():  # the worker's environment: MCP's ${VAR}s, the scrubber
                monkeypatch.setenv(name, value)
            monkeypatch.setattr(step_agents, "STATS_CODE", LEAKY_CODE)
            settings = settings_with(provider_env, **SECRETS, TAVILY_BASE_URL=engine.base_url,
                                     DEERFLOW_CRAWL_ALLOW_HOSTS="127.0.0.1",
                                     MCP_SERVERS=json.dumps({"leaky": mcp_server}))
            async with worker_with(settings) as client:
                yield client, site
    monkeypatch.undo()


async def test_no_canary_leaves_the_worker(
    worker_settings: Settings,
    model_server: FakeModelServer,
    leaky_world: tuple[Client, FakeHTTPServer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.INFO)
    client, site = leaky_world
    handle = await start(client, auto_accept_plan=True, max_step_num=3, mcp_servers=["leaky"])
    result = await handle.result()
    history = readable((await handle.fetch_history()).to_json())

    # The run went through every door: search, crawl, the MCP server (crash, then a tool error) and Python.
    assert result.outcome is Outcome.REPORT
    model_requests = json.dumps(model_server.requests, ensure_ascii=False)
    for activity in ("web_search", "crawl_tool", "mcp_call_tool", "python_repl_tool"):
        assert f'"name": "{activity}"' in history, activity
    assert site.requests, "no page was crawled"
    assert (tmp_path / "crashed").exists(), "the MCP server never crashed"
    assert "could not research" in model_requests

    blobs = "".join(path.read_text("utf-8", "replace") for path in blob_root(worker_settings).rglob("*")
                    if path.is_file())
    captured = capfd.readouterr()
    places = {
        "history": history,
        "blobs": blobs,
        "logs": caplog.text,
        "stdout/stderr": captured.out + captured.err,
        "result": result.model_dump_json(),
        "model requests": model_requests,
    }
    leaks = {place: text[text.index(CANARY) - 80:text.index(CANARY) + 40] for place, text in places.items()
             if CANARY in text}
    assert leaks == {}
    assert "[redacted]" in model_requests  # the tool output arrived, cleaned rather than dropped
