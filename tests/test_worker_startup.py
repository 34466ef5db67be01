"""How fast a replacement worker takes over a dead one's runs (issue #13, item 1).

Two things decide it, besides the machine: what a worker does before it polls, and how long the
server holds a run's workflow task for the dead worker's sticky queue before offering it to the
shared queue (the worker's ``sticky_queue_schedule_to_start_timeout``). The front-door test
(tests/test_front_door.py) times the whole recovery; these pin each part down, independently of
how loaded the machine is.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from temporalio.client import Client

from runtime import embedded, research_client
from tests.support.fake_http import FakeHTTPServer, Reply
from tests.support.processes import REPO_DIR, DevServer, WorkerProcess, wait_for_worker
from tests.support.runs import run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.status import Phase, RunStatus

# Each costs seconds of start-up; the activities that need them import them on first use.
HEAVY_FOR_THE_WORKER = ("langchain_core", "langchain_openai", "openai", "mcp", "trafilatura")
# Only `serve` and `replay` need them; every other command may be reviving a dead worker.
HEAVY_FOR_THE_CLI = ("uvicorn", "fastapi", "server.app", "workflows.research.workflow")


def modules_loaded_by(module: str, candidates: tuple[str, ...]) -> list[str]:
    code = f"import sys, {module}; print(' '.join(m for m in {candidates!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, capture_output=True, text=True, timeout=120,
                          check=True)
    return done.stdout.split()


def test_the_worker_starts_without_the_model_mcp_and_extraction_libraries() -> None:
    assert modules_loaded_by("worker", HEAVY_FOR_THE_WORKER) == []


def test_the_cli_starts_without_the_web_stack_and_the_workflow() -> None:
    assert modules_loaded_by("starter", HEAVY_FOR_THE_CLI) == []


# What httpx and the openai SDK import only because other packages installed it (worker.py keeps them out).
UNUSED_EXTRAS = ("rich", "click", "pygments", "aiohttp")
# What only the __init__ of the packages that runtime/deferred_init.py defers import: API schemas,
# and langchain-openai's other models.
UNUSED_MODULES = ("openai.types.eval_create_params", "langsmith.types.evaluator", "langchain_openai.llms",
                  "langchain_openai.chat_models.azure")
AS_A_WORKER_PROCESS = f"""
import os, runpy, sys
sys.argv = ["worker.py", "--version"]
try:
    runpy.run_path("worker.py", run_name="__main__")
except SystemExit:
    pass
import activities.model.llm
from activities.model import clients
from config.settings import load_settings
clients.warm(load_settings())
print(" ".join(m for m in {UNUSED_EXTRAS!r} if m in sys.modules), "|", "langchain_openai" in sys.modules,
      "|", os.environ.get("PYDANTIC_DISABLE_PLUGINS"), "|", *(m in sys.modules for m in {UNUSED_MODULES!r}))
from openai.types import EvalCreateResponse
from langsmith.types import Run
from langchain_openai import AzureChatOpenAI, OpenAI
print(EvalCreateResponse.__name__, Run.__name__, OpenAI.__name__, AzureChatOpenAI.__name__,
      *(m in sys.modules for m in {UNUSED_MODULES!r}))
"""


def test_a_worker_process_loads_no_optional_extras_it_does_not_use() -> None:
    """The worker's model libraries and HTTP client are there and warm, without httpx's command line
    (rich, click, pygments) or the openai SDK's aiohttp client: 0.07 and 0.17 s of CPU a start, nor
    OpenAI's and LangSmith's API schemas and langchain-openai's other models until a name of theirs is
    asked for (0.57 s, runtime/deferred_init.py). Nor does it look for pydantic plugins
    (runtime/process_start.py)."""
    env = {name: value for name, value in os.environ.items() if name != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run([sys.executable, "-c", AS_A_WORKER_PROCESS], cwd=REPO_DIR, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    warm, asked = done.stdout.splitlines()[-2:]
    assert warm.split() == ["|", "True", "|", "__all__", "|", "False", "False", "False", "False"], done.stdout
    assert asked.split() == ["EvalCreateResponse", "Run", "OpenAI", "AzureChatOpenAI", "True", "True", "True",
                             "True"], done.stdout + done.stderr  # each imported when asked for


# What a first model call imports on its way (activities.model.clients.warm), and a first search.
FIRST_MODEL_CALL = ("openai.resources.chat.completions", "httpcore", "anyio._backends._asyncio")
FIRST_SEARCH = ("activities.web.search_providers",)
LAZY_FOR_THE_FIRST_CALL = FIRST_MODEL_CALL + FIRST_SEARCH
PRELOADED = f"""
import asyncio, os, sys
from activities.support.lazy import preload
from config.settings import load_settings
settings = load_settings(dict(os.environ))
before = [m for m in {LAZY_FOR_THE_FIRST_CALL!r} if m in sys.modules]
asyncio.run(preload(settings, sys.argv[1].split(",")))
from activities.support.tls import verifying_context
print(" ".join(before), "|", " ".join(m for m in {LAZY_FOR_THE_FIRST_CALL!r} if m in sys.modules), "|",
      verifying_context.cache_info().currsize, "langchain_openai" in sys.modules)
"""


@pytest.mark.parametrize(("kinds", "warmed", "model_libraries"), [
    ("main", LAZY_FOR_THE_FIRST_CALL, True),  # the main queue keeps every activity
    ("model,sandbox", FIRST_MODEL_CALL, True),
    ("tools", FIRST_SEARCH, False),  # a tools-only worker never imports the model libraries
])
def test_the_preload_pays_the_first_calls_imports_and_sends_nothing(
        tmp_path: Path, kinds: str, warmed: tuple[str, ...], model_libraries: bool) -> None:
    """A new worker's first run waited about 370 ms more than its second on its first model call and
    110 ms on its first search (bench/overhead.py): its warm-up pays them instead, for the queues it
    serves, without asking the provider anything."""
    with FakeHTTPServer(lambda _seen: Reply(404)) as provider:
        env = {"PATH": os.environ["PATH"], "OPENAI_BASE_URL": f"{provider.base_url}/v1", "OPENAI_API_KEY": "k",
               "BASIC_MODEL": "m", "REASONING_MODEL": "r", "DEERFLOW_HOME": str(tmp_path)}
        done = subprocess.run([sys.executable, "-c", PRELOADED, kinds], cwd=REPO_DIR, env=env, capture_output=True,
                              text=True, timeout=120, check=True)
    before, after, [contexts, imported_model] = (part.split() for part in done.stdout.split("|"))
    assert not set(warmed) <= set(before)  # something was left for the first call to pay
    assert after == list(warmed) and "warm-up failed" not in done.stderr
    assert contexts == "2"  # the model calls' and the crawler's TLS contexts (one bundle load without SSL_CERT_*)
    assert imported_model == str(model_libraries)
    assert provider.requests == []


async def wait_for_review(client: Client, workflow_id: str) -> None:
    handle = client.get_workflow_handle(workflow_id)
    deadline = time.monotonic() + 120
    while (await handle.query("status", result_type=RunStatus)).phase is not Phase.AWAITING_REVIEW:
        assert time.monotonic() < deadline, "the run never reached its plan review"
        await asyncio.sleep(0.1)


async def test_a_dead_workers_paused_run_is_answered_by_another_worker_within_seconds(
        dev_server: DevServer, client: Client, tmp_path: Path) -> None:
    """Worker A holds the paused run in its cache (its sticky queue); B already polls. A dies, and a
    status query must reach B after A's sticky timeout (2 s), not the SDK's default 10 s."""
    first = WorkerProcess(dev_server.address, tmp_path / "a.log").start()
    second: WorkerProcess | None = None
    try:
        await wait_for_worker(client, tmp_path / "a.log", timeout=120)
        handle = await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question="What is rain?"),
                                             id=run_id("sticky"), task_queue=TASK_QUEUE, result_type=ResearchResult)
        await wait_for_review(client, handle.id)  # A answers: the run is now sticky to A
        second = WorkerProcess(dev_server.address, tmp_path / "b.log").start()
        assert second.process is not None
        deadline = time.monotonic() + 120
        while not await embedded.process_polls(client, second.process.pid):
            assert time.monotonic() < deadline, (tmp_path / "b.log").read_text()
            await asyncio.sleep(0.2)
        first.kill()
        began = time.monotonic()
        status = await research_client.status(handle)  # as the CLI and the API server ask
        answered = time.monotonic() - began
        print(f"Status answered {answered:.1f} s after the kill")
        assert status.phase is Phase.AWAITING_REVIEW
        # 2 s on the dead worker's sticky queue, then B replays the run; the old default alone was 10 s.
        assert answered < 8, f"the query waited {answered:.1f} s"
        await handle.cancel()
    finally:
        first.kill()
        if second is not None:
            second.kill()
