"""Records the reference histories in ``tests/histories/`` that the replay tests check.

    .venv/bin/python -m tests.record_histories [SCENARIO ...]    # default: every scenario

Run it only when a deliberate, patched workflow change needs new references, and name only the
new scenarios: the old files should be kept, so that runs started on the old code stay provably
replayable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from config.settings import load_settings
from hosting.registry import build_workers, running
from offline.model_server import FakeModelServer, Fault
from offline.providers import start_offline_providers
from runtime import research_client
from sandbox.activity import SandboxActivities
from tests.support.fake_http import FakeHTTPServer, Reply
from tests.support.processes import TEST_SERVER
from tests.support.runs import IGNORED_SIGNALS, QUESTION, SAMPLE_REPORT
from workflows.content.mcp_checker import MCP_CHECK_WORKFLOW
from workflows.content.speech import SPEECH_WORKFLOW
from workflows.contracts.budget import BudgetTimeoutAction
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.enhance import ENHANCER_WORKFLOW, EnhanceRequest
from workflows.contracts.evaluation import EVALUATOR_WORKFLOW, EvaluateRequest
from workflows.contracts.fork_point import ForkPoint, ForkStage
from workflows.contracts.podcast import PODCAST_WORKFLOW, PodcastRequest, SpeechRequest
from workflows.contracts.prose import PROSE_WORKFLOW, ProseOption, ProseRequest
from workflows.contracts.report_style import ReportStyle
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ReviewTimeoutAction
from workflows.contracts.slides import SLIDES_WORKFLOW, SlidesRequest
from workflows.contracts.status import Phase, RunStatus
from workflows.contracts.tool_activities import MCPListRequest

HISTORIES = Path(__file__).resolve().parent / "histories"
MADE_UP_URL = "http://127.0.0.2:9/zqx-invented-quasar"
# name -> (start input, plan feedback to send (a list: signal arguments sent on the same plan; a
# tuple: on the next plan), model faults to inject first)
SCENARIOS: dict[str, tuple[Any, list[Any], list[Fault]]] = {
    "accepted_plan": (ResearchRequest(question=QUESTION), ["[ACCEPTED]"], []),
    "edited_plan": (ResearchRequest(question=QUESTION),
                    ["[EDIT_PLAN] add a step on manufacturing costs", "[ACCEPTED]"], []),
    "direct_reply": (ResearchRequest(question="hello"), [], []),
    # A start input the workflow rejects: the run fails at once, without a workflow-task failure.
    "bad_request": ({"question": 123}, [], []),
    # A researcher reply with more tool calls than DEERFLOW_MAX_TOOL_CALLS_PER_TURN (set below).
    "capped_tool_calls": (ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1), [],
                          [Fault.tool_call_flood(12, agent="researcher")]),
    # The same flood since BOUNDED_DROPS_PATCH: the dropped calls leave the conversation, one notice stays.
    "bounded_dropped_calls": (ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1), [],
                              [Fault.tool_call_flood(12, agent="researcher")]),
    "ignored_feedback": (ResearchRequest(question=QUESTION), [*IGNORED_SIGNALS, "[ACCEPTED]"], []),
    # Reviews that name their sender (workflows/contracts/decisions.py), each on its own plan: a tuple.
    "named_reviewers": (ResearchRequest(question=QUESTION),
                        [("[EDIT_PLAN] add a step on manufacturing costs", {"name": "alice", "via": "cli"}),
                         ("[ACCEPTED]", {"name": "bob", "via": "api"})], []),
    # A budget crossed before the second step, nobody deciding within two hours: finish now.
    "budget_timeout_finish": (ResearchRequest(question=QUESTION, auto_accept_plan=True, token_budget=7_000,
                                              review_timeout=timedelta(hours=2)), [], []),
    # The same at a cost budget ($0.007 at one USD per million tokens: SETTINGS), since COST_BUDGET_PATCH.
    "cost_budget_timeout_finish": (ResearchRequest(question=QUESTION, auto_accept_plan=True, cost_budget_usd=0.007,
                                                   review_timeout=timedelta(hours=2)), [], []),
    # Since issue #48: the budget keeps the report's reserve free, so 14,000 tokens pause the run after its first
    # step; nobody deciding, the timeout finishes it, said once as a timeout.
    "budget_reserve_timeout_finish": (ResearchRequest(question=QUESTION, auto_accept_plan=True, token_budget=14_000,
                                                      review_timeout=timedelta(hours=2)), [], []),
    # A request naming no budget has the operator's maximum (SETTINGS), and parallel steps each count their own
    # calls: the two research steps run side by side, then the pause before the third times out.
    "budget_maximum_parallel": (ResearchRequest(question=QUESTION, auto_accept_plan=True, parallel_steps=True,
                                                review_timeout=timedelta(hours=2)), [], []),
    # Nobody reviewing the plan, or deciding at the budget, within two hours, and the request says to cancel
    # then: since CANCELS_ITSELF_PATCH the run asks the server to cancel it (cancel_itself) and ends cancelled.
    "review_timeout_cancel": (ResearchRequest(question=QUESTION, review_timeout=timedelta(hours=2),
                                              review_timeout_action=ReviewTimeoutAction.CANCEL), [], []),
    "budget_timeout_cancel": (ResearchRequest(question=QUESTION, auto_accept_plan=True, token_budget=7_000,
                                              review_timeout=timedelta(hours=2),
                                              budget_timeout_action=BudgetTimeoutAction.CANCEL), [], []),
    # A plan without a title: the planner is asked once more, quoting the error (issue #11).
    "reasked_plan": (ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1), [],
                     [Fault.plan_without_title()]),
    # A first plan claiming enough context: reviewed like any other, then reported from nothing.
    "no_research_review": (ResearchRequest(question=QUESTION), ["[ACCEPTED]"], [Fault.no_research_plan()]),
    # A plan that is not quite JSON, mended by the chat activity, read strictly by the workflow (issue #42 §1).
    "mended_plan": (ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1), [],
                    [Fault.malformed_plan()]),
    # A researcher that calls no tool (a model that never does): the report says so at its top (issue #24).
    "no_search_step": (ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1), [],
                       [Fault.no_tool_call(agent="researcher")]),
    # A researcher that searches for a URL it made up, then crawls it (issue #42 §7): refused since
    # FOUND_URLS_ONLY_PATCH, the URL being found nowhere but in the model's own words (a loopback
    # address on the discard port: were it ever crawled, nothing would leave the machine).
    "unfound_url_refused": (ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1), [],
                            [Fault.call("web_search", {"query": MADE_UP_URL}, agent="researcher"),
                             Fault.call("crawl_tool", {"url": MADE_UP_URL}, agent="researcher")]),
    # A step starts with the background investigation's result URLs found (issue #42 §7), since
    # BACKGROUND_URLS_PATCH; before it, only the question's and the plan's.
    "background_urls_found": (ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=1), [], []),
    # DeerFlow's prompt enhancer, its own small workflow (POST /api/prompt/enhance).
    "prompt_enhance": (EnhanceRequest(prompt="solar panels on school roofs", report_style=ReportStyle.NEWS), [], []),
    # The content flows (server/content.py), each its own small workflow.
    "report_evaluation": (EvaluateRequest(content=SAMPLE_REPORT, query="tidal power", report_style="news",
                                          use_llm=True), [], []),
    "prose_fix": (ProseRequest(prompt="tides rise  twice a day. they are predictable.", option=ProseOption.FIX),
                      [], []),
    "slides": (SlidesRequest(content=SAMPLE_REPORT), [], []),
    # Recorded without DEERFLOW_TTS_URL: the script, and the note that no voice is configured.
    "podcast_no_voice": (PodcastRequest(content=SAMPLE_REPORT), [], []),
    # With a voice (SETTINGS below): one speak activity per line, then join_audio.
    "podcast": (PodcastRequest(content=SAMPLE_REPORT), [], []),
    "speech": (SpeechRequest(text="Hello Deer"), [], []),
    "mcp_check": (MCPListRequest(server_name="calc", agent="researcher"), [], []),
    # Cancelled by a named person while a researcher's turn is held at the model (CANCELLED_AT), one
    # step at a time and side by side: since CANCELLED_CALL_PATCH the run ends cancelled, not failed.
    "cancelled_researcher_turn": (ResearchRequest(question=QUESTION, auto_accept_plan=True), [],
                                  [Fault.timeout(4, agent="researcher")]),
    "cancelled_parallel_steps": (ResearchRequest(question=QUESTION, auto_accept_plan=True, parallel_steps=True), [],
                                 [Fault.timeout(4, agent="researcher")]),
    # Forks of a run that ran to its report (FORK_SOURCES): the source's results before the point are read from
    # it (read_fork_source), and only what comes after is run again, in the fork's style and with its edit.
    "fork_from_plan": (ResearchRequest(question=QUESTION, auto_accept_plan=True, forked_from=ForkPoint(
        workflow_id="history-fork_from_plan-source", stage=ForkStage.PLAN, edit="add a step on manufacturing costs")),
                       [], []),
    "fork_from_step": (ResearchRequest(question=QUESTION, auto_accept_plan=True, report_style=ReportStyle.NEWS,
                                       forked_from=ForkPoint(workflow_id="history-fork_from_step-source",
                                                             stage=ForkStage.STEP, step=2,
                                                             edit="Compare sulfide and oxide electrolytes")), [], []),
    "fork_from_report": (ResearchRequest(question=QUESTION, auto_accept_plan=True, report_style=ReportStyle.NEWS,
                                         locale="zh-CN", forked_from=ForkPoint(
                                             workflow_id="history-fork_from_report-source", stage=ForkStage.REPORT,
                                             edit="Lead with the costs")), [], []),
    # Since USAGE_MEMO_PATCH (issue #46) a run keeps what it has spent in its memo, at each phase and step.
    "usage_memo": (ResearchRequest(question=QUESTION, max_step_num=1), ["[ACCEPTED]"], []),
}
# The run each fork scenario forks, run to its end first under the id its point names.
FORK_SOURCES: dict[str, ResearchRequest] = {
    name: ResearchRequest(question=QUESTION, auto_accept_plan=True)
    for name in ("fork_from_plan", "fork_from_step", "fork_from_report")
}
# Scenarios cancelled once their first (held) model fault has been taken; by whom.
CANCELLED_AT: dict[str, Actor] = {"cancelled_researcher_turn": Actor(name="carol", via=Via.CLI),
                                  "cancelled_parallel_steps": Actor(name="carol", via=Via.CLI)}
# Scenarios that need an operator setting, by env name; "{tts}" is the fake speech server's base URL.
MCP_TEST_SERVER = str(Path(__file__).parent / "support" / "mcp_test_server.py")
SETTINGS: dict[str, dict[str, str]] = {
    "cost_budget_timeout_finish": {"DEERFLOW_MODEL_PRICES": json.dumps({"deerflow-offline-demo": {"input": 1,
                                                                                                  "output": 1}})},
    "budget_maximum_parallel": {"DEERFLOW_RUN_TOKEN_BUDGET_MAX": "16000"},
    "podcast": {"DEERFLOW_TTS_URL": "{tts}/v1"},
    "speech": {"DEERFLOW_TTS_URL": "{tts}/v1"},
    "mcp_check": {"MCP_SERVERS": json.dumps({"calc": {"transport": "stdio", "command": sys.executable,
                                                      "args": [MCP_TEST_SERVER]}})},
}
# The small workflows, by their request's type; the rest are research runs.
FLOW_TYPES: dict[type, str] = {EnhanceRequest: ENHANCER_WORKFLOW, EvaluateRequest: EVALUATOR_WORKFLOW,
                               ProseRequest: PROSE_WORKFLOW, SlidesRequest: SLIDES_WORKFLOW,
                               PodcastRequest: PODCAST_WORKFLOW, SpeechRequest: SPEECH_WORKFLOW,
                               MCPListRequest: MCP_CHECK_WORKFLOW}


async def _wait_for_review(handle: WorkflowHandle, after: str | None) -> str:
    """Wait for a pause on a plan other than ``after``; returns that plan (as JSON: an edit keeps the title)."""
    for _ in range(400):
        status = await handle.query("status", result_type=RunStatus)
        if status.phase is Phase.AWAITING_REVIEW and status.plan and status.plan.model_dump_json() != after:
            return status.plan.model_dump_json()
        await asyncio.sleep(0.05)
    raise TimeoutError("the run never paused for review")


async def _cancel_once_held(handle: WorkflowHandle, model: FakeModelServer, by: Actor) -> None:
    """Cancel the run, in ``by``'s name, once the model has taken the fault that holds its call."""
    for _ in range(400):
        if not model.pending_faults:
            await research_client.cancel(handle, by)
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the held call never reached the model")


async def _run_source(client: Client, workflow_id: str, request: ResearchRequest) -> None:
    """Run a fork scenario's source to its end (its history is not recorded: the fork's holds what it read)."""
    handle = await client.start_workflow(WORKFLOW_TYPE, request, id=workflow_id, task_queue=TASK_QUEUE)
    await handle.result()


async def record(names: list[str]) -> None:
    providers = start_offline_providers(load_settings())
    assert providers.model is not None, "record with the offline model (unset OPENAI_API_KEY)"
    base = {**os.environ, **providers.overrides, "DEERFLOW_MAX_TOOL_CALLS_PER_TURN": "4",
            "DEERFLOW_MAX_ACTIVITIES_IN_FLIGHT": "2", "DEERFLOW_PAYLOAD_STORE": "none"}
    sandbox = SandboxActivities(load_settings(base))
    fakes = contextlib.ExitStack()
    speech = fakes.enter_context(  # a fake voice: two MP3 sync bytes and the line's start
        FakeHTTPServer(lambda seen: Reply(body=b"\xff\xfb" + seen.json()["input"][:8].encode())))
    HISTORIES.mkdir(exist_ok=True)
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=TEST_SERVER
    )
    try:
        for name in names:
            overrides = {key: value.replace("{tts}", speech.base_url) for key, value in SETTINGS.get(name, {}).items()}
            async with running(build_workers(env.client, load_settings({**base, **overrides}), sandbox=sandbox)):
                request, feedback, faults = SCENARIOS[name]
                if name in FORK_SOURCES:
                    await _run_source(env.client, f"history-{name}-source", FORK_SOURCES[name])
                providers.model.inject(*faults)
                workflow_type = FLOW_TYPES.get(type(request), WORKFLOW_TYPE)
                handle = await env.client.start_workflow(workflow_type, request, id=f"history-{name}",
                                                         task_queue=TASK_QUEUE)
                reviewed: str | None = None
                for message in feedback:
                    if isinstance(message, list):
                        await _wait_for_review(handle, None)
                        await handle.signal("plan_feedback", args=message)
                        continue
                    reviewed = await _wait_for_review(handle, reviewed)
                    arguments = list(message) if isinstance(message, tuple) else [message]
                    await handle.signal("plan_feedback", args=arguments)
                if name in CANCELLED_AT:
                    await _cancel_once_held(handle, providers.model, CANCELLED_AT[name])
                with contextlib.suppress(WorkflowFailureError):  # bad_request fails, cancelled ones too
                    await handle.result()
                history = await handle.fetch_history()
                (HISTORIES / f"{name}.json").write_text(history.to_json(), encoding="utf-8")
                print(f"recorded {name}: {len(history.events)} events")
    finally:
        await env.shutdown()
        providers.stop()
        fakes.close()


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1:] or list(SCENARIOS)))
