"""Research runs on a real local model server (issue #24): outcome, model calls, searches, wall time.

    .venv/bin/python bench/local_model.py --base-url http://127.0.0.1:18480/v1 --model smollm2 --runs 3

A dev server and one real worker process (``worker.py``) are started here, the worker pointed at
the model server given (llama-server, vLLM, Ollama: anything OpenAI-compatible, on loopback) and
at the bundled search corpus (``offline/search_server.py``, served here), whose pages are served
on loopback too (``bench/corpus_site.py``), so a crawl of a found URL reads the page. Each run is a research
run with the plan auto-accepted; afterwards its history is read for the calls it made and replayed
against the current workflow code. The worker reaches the model through a recording proxy
(``bench/recording_proxy.py``), so the row also says how many of the run's chat requests (the
probe's included) carried an output cap. One markdown table row a run, for ``docs/local-models.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benches run as plain scripts

from temporalio.client import WorkflowFailureError, WorkflowHistory
from temporalio.worker import Replayer

from bench.corpus_site import corpus_site
from bench.harness import BenchWorker, connect_when_healthy, count_activities, header, run_main
from bench.plan_reviewer import PlanReviewer
from bench.recording_proxy import recording_proxy
from config.settings import load_settings
from offline.providers import search_env
from offline.search_server import FakeSearchServer
from runtime.converter import data_converter
from runtime.workflow_runner import workflow_runner
from tests.support.processes import DevServer
from workflows.calls.errors import failure_message
from workflows.catalog import WORKFLOWS
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult
from workflows.contracts.status import RunStatus

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = ("What are the benefits of solar power?", "How do heat pumps work?", "Is nuclear power safe?")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the model server's OpenAI-compatible /v1 URL")
    parser.add_argument("--model", default="local", help="BASIC_MODEL: the model's name on that server")
    parser.add_argument("--mode", default="auto", choices=("auto", "native", "json"), help="LLM_TOOL_MODE")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--first", type=int, default=1, help="the first run's number (its question: the Nth)")
    parser.add_argument("--steps", type=int, default=2, help="max_step_num of each run")
    parser.add_argument("--timeout", type=float, default=120, help="LLM_REQUEST_TIMEOUT, seconds a call")
    parser.add_argument("--save", type=Path, help="a directory for each run's history and report")
    parser.add_argument("--review", action="store_true",
                        help="review plans as a person who wants research (bench/plan_reviewer.py), not auto-accept")
    return parser.parse_args(argv)


async def replays(history: WorkflowHistory, settings_converter: object) -> bool:
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=settings_converter,  # type: ignore[arg-type]
                        workflow_runner=workflow_runner())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    return result.replay_failure is None


async def main(args: argparse.Namespace) -> None:
    header(f"research runs on {args.base_url} ({args.model}), LLM_TOOL_MODE={args.mode}")
    with tempfile.TemporaryDirectory(prefix="deerflow-local-") as tmp, contextlib.ExitStack() as stop:
        workdir = Path(tmp)
        search = FakeSearchServer().start()
        stop.callback(search.stop)
        search.index, site_env = stop.enter_context(corpus_site())
        target = urlsplit(args.base_url)
        proxy_url, seen = stop.enter_context(recording_proxy(f"{target.scheme}://{target.netloc}"))
        env = {"DEERFLOW_HOME": str(workdir / "home"), "DEERFLOW_PAYLOAD_STORE": "none",
               "OPENAI_BASE_URL": proxy_url + target.path, "OPENAI_API_KEY": "local", "BASIC_MODEL": args.model,
               "LLM_TOOL_MODE": args.mode, "LLM_REQUEST_TIMEOUT": str(args.timeout), **search_env(search), **site_env,
               "PYTHONPATH": str(REPO / "bench" / "loopback_only")}  # crawls of made-up URLs stay on loopback
        settings = load_settings({**os.environ, **env})
        server = DevServer(workdir / "temporal.db").start()
        stop.callback(server.stop)
        worker = BenchWorker(server.address, workdir / "worker.log", env, REPO / "worker.py").start()
        stop.callback(worker.stop)
        converter = data_converter(settings)
        client = await connect_when_healthy(server.address, converter)
        print("| run | question | outcome | plan edits | model calls (JSON mode) | capped requests | tokens "
              "| step searches | crawls | wall s | replays |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for number in range(args.first, args.first + args.runs):
            question = QUESTIONS[(number - 1) % len(QUESTIONS)]
            request = ResearchRequest(question=question, auto_accept_plan=not args.review, max_step_num=args.steps)
            began, first = time.perf_counter(), len(seen)
            handle = await client.start_workflow(WORKFLOW_TYPE, request, id=f"local-{time.time_ns()}",
                                                 task_queue=TASK_QUEUE, result_type=ResearchResult)
            reviewer = PlanReviewer(handle)
            reviewing = asyncio.create_task(reviewer.review()) if args.review else None
            try:
                result = await handle.result()
                outcome, report = result.outcome.value, result.report
            except WorkflowFailureError as error:
                outcome, report = f"failed: {failure_message(error.cause)[:120]}", ""
            finally:
                if reviewing is not None:
                    reviewing.cancel()
            wall = time.perf_counter() - began
            status = await handle.query("status", result_type=RunStatus)
            history = await handle.fetch_history()
            background = int(request.enable_background_investigation and bool(status.plan_history))
            searches = count_activities(history, "web_search")[0] - background
            crawls = count_activities(history, "crawl_tool")[0]
            usage, requests = status.usage, seen[first:]
            capped = sum(request.cap is not None for request in requests)
            print(f"| {number} | {question} | {outcome} | {reviewer.edits} | {usage.llm_calls} "
                  f"({usage.json_tool_calls}) | {capped}/{len(requests)} | {usage.total_tokens:,} | {searches} | "
                  f"{crawls} | {wall:.0f} | "
                  f"{'yes' if await replays(history, converter) else 'NO'} |", flush=True)
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"run{number}.json").write_text(history.to_json(), encoding="utf-8")
                (args.save / f"run{number}.md").write_text(report, encoding="utf-8")


if __name__ == "__main__":
    run_main(main(parse_args()))
