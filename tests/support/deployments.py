"""A small deployment for the end-to-end tests of reading runs back (inspect, fleet replay, the replay
corpus): its own dev server, one real worker process, the offline model and search corpus, and a
loopback page the researcher crawls; plain, or with encryption. Payloads over 2 KiB go to the blob
store, so what the tests read back (the crawled page, the conversations) is read from it.

``research`` runs one research run as a person does with ``starter.py``: started, its plan reviewed
with ``review --accept --as alice``, and waited for.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from config.settings import load_settings
from offline.model_server import FakeModelServer
from offline.providers import offline_env, without_provider_settings
from offline.search_server import FakeSearchServer
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from tests.support.fake_http import FakeHTTPServer, Reply, Seen
from tests.support.processes import DevServer, WorkerProcess, run_starter, start_worker
from tests.support.runs import QUESTION, run_id
from workflows.contracts.research import ResearchResult
from workflows.contracts.status import Phase, RunStatus

PAGE_PHRASE = "Zephyrite lattice anodes kept 97 percent of their capacity after 4000 cycles"
# A credential the page quotes, unknown to the worker's scrubber: it reaches history, as a page's text can.
# The readers' tests give it to the CLI as a secret (SUPPORT_DESK_TOKEN), which must not show it.
PAGE_SECRET = "desk-ticket-7f3a9c21e8"
THRESHOLD = 2048


def new_keys() -> str:
    return f"e2e-1:{base64.b64encode(os.urandom(32)).decode()}"


def page(seen: Seen) -> Reply:
    paragraphs = "".join(f"<p>Finding {n}: {PAGE_PHRASE}, in a solid-state cell for electric vehicles.</p>"
                         for n in range(12))
    return Reply(body=f"<html><head><title>Zephyrite anodes</title></head><body><article>{paragraphs}"
                      f"<p>Support ticket {PAGE_SECRET}.</p></article></body></html>")


@dataclass
class Deployment:
    dev: DevServer
    env: dict[str, str]  # the worker's settings, by env name; the CLI's too (with TEMPORAL_ADDRESS)
    client: Client
    worker: WorkerProcess

    def cli_env(self, **changes: str | None) -> dict[str, str]:
        """What ``starter.py`` runs with here; a value of None leaves that setting out."""
        env = {**without_provider_settings(os.environ), "DEERFLOW_ENV_FILE": os.devnull,
               "TEMPORAL_ADDRESS": self.dev.address, **self.env}
        for name, value in changes.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    def starter(self, *args: str, **changes: str | None) -> subprocess.CompletedProcess[str]:
        return run_starter(self.cli_env(**changes), *args)


@dataclass
class Fakes:
    """The fakes a module's deployments share, and the settings (by env name) that point at them."""

    env: dict[str, str]
    site: FakeHTTPServer  # the page the researcher crawls (its requests show it was)


@contextlib.contextmanager
def providers(root: Path) -> Iterator[Fakes]:
    """The model, the search corpus and the page it links to; payloads over ``THRESHOLD`` to the store."""
    with contextlib.ExitStack() as stack:
        site = stack.enter_context(FakeHTTPServer(page))
        corpus = root / "corpus.json"
        corpus.write_text(json.dumps([
            {"title": f"Solid-state battery study {n}", "url": f"{site.base_url}/study-{n}",
             "content": "Solid-state batteries for electric vehicles: a study of lattice anodes.",
             "published_date": "2026-01-01"} for n in range(2)]))
        search = stack.enter_context(FakeSearchServer(corpus_path=corpus))
        model = stack.enter_context(FakeModelServer())
        yield Fakes({**offline_env(model, search), "DEERFLOW_CRAWL_ALLOW_HOSTS": "127.0.0.1",
                     "DEERFLOW_PAYLOAD_THRESHOLD_BYTES": str(THRESHOLD)}, site)


@contextlib.asynccontextmanager
async def deployment(root: Path, fakes: Fakes, **settings: str) -> AsyncIterator[Deployment]:
    """A dev server and a worker process with ``settings`` (e.g. DEERFLOW_ENCRYPTION_KEYS), home under ``root``."""
    dev = DevServer(root / "temporal.db").start()
    try:
        env = {"DEERFLOW_HOME": str(root / "home"), **fakes.env, **settings}
        client = await connect_when_ready(dev.address, data_converter=data_converter(load_settings(env)))
        worker = await start_worker(dev, client, root / "worker.log", **env)
        try:
            yield Deployment(dev, env, client, worker)
        finally:
            worker.stop()
    finally:
        dev.stop()


async def _awaits_review(handle: WorkflowHandle) -> bool:
    """Whether the run waits for its plan review; a query a loaded worker did not answer in time is asked again."""
    try:
        return (await handle.query("status", result_type=RunStatus)).phase is Phase.AWAITING_REVIEW
    except RPCError:
        return False


async def research(where: Deployment, question: str = QUESTION) -> tuple[str, ResearchResult]:
    """One run started with ``starter.py run``, its plan accepted by alice with ``starter.py review``."""
    workflow_id = run_id("inspected")
    started = where.starter("run", question, "--no-wait", "--max-steps", "1", "--id", workflow_id)
    assert started.returncode == 0, started.stdout + started.stderr
    handle = where.client.get_workflow_handle(workflow_id, result_type=ResearchResult)
    deadline = time.monotonic() + 180
    while not await _awaits_review(handle):
        assert time.monotonic() < deadline, "the run never paused for its plan review"
        await asyncio.sleep(0.2)
    reviewed = where.starter("review", workflow_id, "--accept", "--as", "alice")
    assert reviewed.returncode == 0, reviewed.stdout + reviewed.stderr
    return workflow_id, await handle.result()
