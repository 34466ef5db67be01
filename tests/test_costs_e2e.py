"""``starter.py costs`` equals the cost metric, end to end (issue #48 item 5): the dev server, a real
worker process (its metrics on a port of its own), ``starter.py serve``, a research run and every
content flow that calls the model through the API (the report judge, prose, slides, the podcast's
script, the prompt enhancer), one of them failing after its calls, and ``starter.py evaluate --llm``,
then ``starter.py costs``.

Before, ``costs`` read research runs only: the flows were on the dashboard and not in ``costs``
($10.20 against $10.00). Now each flow counts under its own name, a failed one by its ``usage``
query, and the two totals agree to the metric's micro-USD. Each flow is under who started it in the
STARTED BY table (it was "(not recorded)": only research runs named their starter).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from offline.model_faults import Fault
from offline.model_server import FakeModelServer
from tests.support.processes import DevServer, ServeProcess, WorkerProcess, free_port, run_starter, start_worker
from tests.support.prometheus_text import scrape, total
from tests.support.runs import QUESTION, SAMPLE_REPORT
from workflows.contracts.usage import MICRO

pytestmark = pytest.mark.timeout(300)

PRICES = json.dumps({"deerflow-offline-demo": {"input": 100, "output": 100}})
METRICS = f"127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("costs")


@pytest.fixture(scope="module")
async def worker(dev_server: DevServer, client: Client, folder: Path,
                 provider_env: dict[str, str]) -> AsyncIterator[WorkerProcess]:
    process = await start_worker(dev_server, client, folder / "worker.log", **provider_env,
                                 DEERFLOW_HOME=str(folder / "home"), DEERFLOW_MODEL_PRICES=PRICES,
                                 DEERFLOW_METRICS_ADDRESS=METRICS)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def api(dev_server: DevServer, worker: WorkerProcess, folder: Path) -> Iterator[str]:
    server = ServeProcess(dev_server.address, free_port(), folder / "serve.log", folder / "home")
    yield server.url
    server.kill()


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url, json=body, timeout=120)


def research_run(api: str) -> str:
    run = post(f"{api}/api/runs", {"question": QUESTION, "auto_accept_plan": True, "max_step_num": 1}).json()["id"]
    deadline = time.monotonic() + 120
    while httpx.get(f"{api}/api/runs/{run}", timeout=30).json()["status"] != "completed":
        assert time.monotonic() < deadline, f"run {run} did not complete"
        time.sleep(0.5)
    return str(run)


def table(output: str, heading: str) -> dict[str, str]:
    """A table of ``costs``' output: each row's first column and its RUNS figure."""
    rows = output.split(f"\n{heading} ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return {name.strip(): runs for name, runs in (re.split(r"\s{2,}", row)[:2] for row in rows)}


def test_costs_counts_every_model_call_the_metric_counts(
        api: str, dev_server: DevServer, folder: Path, model_server: FakeModelServer) -> None:
    run = research_run(api)
    env = {"TEMPORAL_ADDRESS": dev_server.address, "DEERFLOW_HOME": str(folder / "home"), "PATH": "/usr/bin:/bin"}
    # The CLI's content flow, in the name it is given (its own judge's calls).
    graded = run_starter(env, "evaluate", run, "--llm", "--as", "dana")
    assert graded.returncode == 0, graded.stderr
    assert post(f"{api}/api/report/evaluate", {"content": SAMPLE_REPORT, "query": "tidal power",
                                               "use_llm": True}).status_code == 200
    assert post(f"{api}/api/prose/generate", {"prompt": "tides rise  twice a day.", "option": "fix"}).status_code == 200
    assert post(f"{api}/api/ppt/generate", {"content": SAMPLE_REPORT}).status_code == 200
    assert post(f"{api}/api/podcast/generate", {"content": SAMPLE_REPORT}).status_code == 503  # no voice: the script
    assert post(f"{api}/api/prompt/enhance", {"prompt": "solar panels on school roofs"}).status_code == 200
    # A flow that fails after its calls: the composer's three empty replies cost their prompts.
    model_server.inject(*[Fault.empty(agent="presentation_composer")] * 3)
    assert post(f"{api}/api/ppt/generate", {"content": SAMPLE_REPORT}).status_code == 502

    metric = total(scrape(METRICS), "deerflow_llm_cost_microusd") / MICRO
    assert metric > 0
    costs = run_starter(env, "costs", "--since", "1h")
    assert costs.returncode == 0, costs.stderr
    said = re.search(r"(\d+) runs · [\d,]+ tokens · \$([\d,.]+) estimated", costs.stdout)
    assert said is not None, costs.stdout
    assert said[1] == "8" and float(said[2].replace(",", "")) == round(metric, 4), (costs.stdout, metric)
    kinds = {line.split("  ")[0] for line in costs.stdout.splitlines()}
    assert {"research", "report evaluation", "prose writer", "slide composer", "podcast",
            "prompt enhancer"} <= kinds, costs.stdout
    assert "without a readable usage" not in costs.stdout, costs.stdout
    # Who started each flow, as each research run (the API server's holder: "local" without tokens).
    assert table(costs.stdout, "STARTED BY") == {"local (api)": "7", "dana (cli)": "1"}, costs.stdout
