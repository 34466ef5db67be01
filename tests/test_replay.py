"""Replays the recorded reference histories against the current workflow code.

A change to workflow code that would break runs already in flight fails here. The last test
proves the suite can fail: a deliberately altered workflow must not replay.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.worker import Replayer

import starter
from runtime.workflow_runner import workflow_runner
from tests.support.history_checks import HISTORIES, activity_types, load, most_pending, tool_batches
from workflows.calls.activity_options import CANCELLED_CALL_PATCH
from workflows.catalog import WORKFLOWS
from workflows.contracts.research import ResearchResult
from workflows.research import workflow as research
from workflows.research.agent_loop import BOUNDED_DROPS_PATCH
from workflows.research.budget import COST_BUDGET_PATCH, MAXIMUM_BOUNDS_PATCH
from workflows.research.research_run import ResearchRun
from workflows.research.run_state import USAGE_MEMO_PATCH
from workflows.research.step_loop import BACKGROUND_URLS_PATCH, OWN_STEP_USAGE_PATCH
from workflows.research.tools import FOUND_URLS_ONLY_PATCH
from workflows.research.visibility import USAGE_MEMO
from workflows.research.workflow import DeepResearchWorkflow

RECORDED = sorted(HISTORIES.glob("*.json"))


def test_the_reference_scenarios_are_recorded() -> None:
    assert {"accepted_plan", "edited_plan", "direct_reply", "bad_request", "capped_tool_calls", "reasked_plan",
            "no_research_review", "prompt_enhance", "report_evaluation", "prose_fix", "slides",
            "podcast_no_voice", "podcast", "speech", "mcp_check", "named_reviewers", "budget_timeout_finish",
            "bounded_dropped_calls", "cost_budget_timeout_finish", "budget_reserve_timeout_finish",
            "unfound_url_refused", "budget_maximum_parallel", "cancelled_researcher_turn", "cancelled_parallel_steps",
            "cancelled_researcher_turn_before_cancel_patch", "review_timeout_cancel",
            "budget_timeout_cancel", "review_timeout_cancel_before_cancel_itself",
            "budget_timeout_cancel_before_cancel_itself", "fork_from_plan", "fork_from_step",
            "fork_from_report", "mended_plan", "report_evaluation_before_metrics_activity", "usage_memo",
            "background_urls_found"} <= {
        path.stem for path in RECORDED}


def test_a_bad_request_history_fails_the_run_in_its_first_task() -> None:
    kinds = [event.event_type for event in load(HISTORIES / "bad_request.json").events]
    assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds


@pytest.mark.parametrize("name", ["capped_tool_calls", "bounded_dropped_calls"])
def test_the_capped_history_ran_only_the_first_tool_calls_of_the_flood(name: str) -> None:
    history = load(HISTORIES / f"{name}.json")
    assert max(tool_batches(history)) == 4  # of 12 calls; recorded with DEERFLOW_MAX_TOOL_CALLS_PER_TURN=4
    assert most_pending(history) <= 2  # and DEERFLOW_MAX_ACTIVITIES_IN_FLIGHT=2


def test_the_unfound_url_history_refused_the_crawl_behind_its_patch() -> None:
    history = load(HISTORIES / "unfound_url_refused.json")
    assert "crawl_tool" not in activity_types(history).values() and "web_search" in activity_types(history).values()
    patches = [payload.data for event in history.events if event.HasField("marker_recorded_event_attributes")
               for payload in event.marker_recorded_event_attributes.details["patch-data"].payloads]
    assert any(f'"id":"{FOUND_URLS_ONLY_PATCH}"'.encode() in data for data in patches)


@pytest.mark.parametrize(("name", "patch"), [("bounded_dropped_calls", BOUNDED_DROPS_PATCH),
                                             ("background_urls_found", BACKGROUND_URLS_PATCH)])
def test_the_history_carries_its_patch_marker(name: str, patch: str) -> None:
    assert any(f'"id":"{patch}"'.encode() in data for data in patches_of(name))


@pytest.mark.parametrize("path", RECORDED, ids=[path.stem for path in RECORDED])
async def test_recorded_history_replays_with_current_code(path: Path) -> None:
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=pydantic_data_converter,
                        workflow_runner=workflow_runner())
    result = await replayer.replay_workflow(load(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


@pytest.mark.parametrize(("name", "activities"), [
    # Read the source beside the config, then plan again (with the edit), its 4 steps' turns, the report.
    ("fork_from_plan", {"read_fork_source": 1, "chat": 8}),
    ("fork_from_step", {"read_fork_source": 1, "chat": 5}),  # steps 2 and 3, two turns each, and the report
    ("fork_from_report", {"read_fork_source": 1, "chat": 1}),  # the report alone
])
def test_a_fork_history_read_its_source_once_and_paid_only_after_its_point(name: str,
                                                                            activities: dict[str, int]) -> None:
    order = [event.activity_task_scheduled_event_attributes.activity_type.name
             for event in load(HISTORIES / f"{name}.json").events
             if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert {kind: Counter(order)[kind] for kind in activities} == activities
    assert sorted(order[:2]) == ["load_run_config", "read_fork_source"] and order[2] == "chat"  # no coordinator,
    # no background search: the first call is the planner's, a step's or the reporter's


def test_edited_history_contains_both_review_signals() -> None:
    history = load(HISTORIES / "edited_plan.json")
    signals = [event.workflow_execution_signaled_event_attributes.signal_name for event in history.events
               if event.HasField("workflow_execution_signaled_event_attributes")]
    assert signals == ["plan_feedback", "plan_feedback"]


def test_the_named_reviewers_history_sends_each_review_with_its_sender() -> None:
    history = load(HISTORIES / "named_reviewers.json")
    senders = [len(event.workflow_execution_signaled_event_attributes.input.payloads) for event in history.events
               if event.HasField("workflow_execution_signaled_event_attributes")]
    assert senders == [2, 2]


def patches_of(name: str) -> list[bytes]:
    return [payload.data for event in load(HISTORIES / f"{name}.json").events
            if event.HasField("marker_recorded_event_attributes")
            for payload in event.marker_recorded_event_attributes.details["patch-data"].payloads]


@pytest.mark.parametrize("name", ["budget_timeout_finish", "cost_budget_timeout_finish",
                                  "budget_reserve_timeout_finish", "budget_maximum_parallel"])
def test_the_budget_histories_paused_on_a_durable_timer(name: str) -> None:
    events = load(HISTORIES / f"{name}.json").events
    timers = [event.timer_started_event_attributes.start_to_fire_timeout.seconds
              for event in events if event.HasField("timer_started_event_attributes")]
    assert timers == [2 * 3600]  # the budget decision's deadline (review_timeout PT2H)
    cost_paused = any(f'"id":"{COST_BUDGET_PATCH}"'.encode() in data for data in patches_of(name))
    assert cost_paused == (name == "cost_budget_timeout_finish")


def test_the_usage_memo_history_kept_the_spend_at_each_phase_and_step_and_ended_with_the_results() -> None:
    """Since USAGE_MEMO_PATCH the memo says what the run has spent: a listing reads it, no query per run."""
    events = load(HISTORIES / "usage_memo.json").events
    memos = [json.loads(event.workflow_properties_modified_event_attributes.upserted_memo.fields[USAGE_MEMO].data)
             for event in events if event.HasField("workflow_properties_modified_event_attributes")]
    assert [memo["llm_calls"] for memo in memos] == [0, 1, 2, 4, 5]  # coordinating, background, review, step, end
    result = json.loads(events[-1].workflow_execution_completed_event_attributes.result.payloads[0].data)
    assert memos[-1] == result["usage"]
    assert any(f'"id":"{USAGE_MEMO_PATCH}"'.encode() in data for data in patches_of("usage_memo"))
    assert not any(event.HasField("workflow_properties_modified_event_attributes")
                   for event in load(HISTORIES / "accepted_plan.json").events)  # before it: none, and it replays


def test_the_maximum_and_parallel_budget_history_carries_both_patches() -> None:
    patches = patches_of("budget_maximum_parallel")
    for patch in (MAXIMUM_BOUNDS_PATCH, OWN_STEP_USAGE_PATCH):
        assert any(f'"id":"{patch}"'.encode() in data for data in patches), patch


@workflow.defn(dynamic=True, sandboxed=False)
class SkipsBackgroundInvestigation(DeepResearchWorkflow):
    """A careless change: the background search is dropped without ``workflow.patched``
    (``investigate`` is replaced in the workflow module, which this unsandboxed copy runs)."""

    @workflow.run
    async def run(self, inputs: Sequence[RawValue]) -> ResearchResult:
        return await super().run(inputs)


async def test_a_non_deterministic_change_is_caught_by_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """The failure this test expects is the one a run would meet: the history scheduled the background
    search where the changed code asks the planner. The core also logs it as a warning of a failing
    workflow task, which read in a suite's log like a real nondeterminism (issue #42, item 8): this
    replayer's runtime keeps it to errors, as ``starter.py replay`` does."""
    async def skip(_run: ResearchRun, _topic: str) -> None:
        return None

    monkeypatch.setattr(research, "investigate", skip)
    quiet = Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=TelemetryFilter("ERROR", "ERROR"))))
    replayer = Replayer(workflows=[SkipsBackgroundInvestigation], data_converter=pydantic_data_converter, runtime=quiet)
    result = await replayer.replay_workflow(load(HISTORIES / "accepted_plan.json"), raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert ("[TMPRL1100] Nondeterminism error: Activity type of scheduled event 'web_search' does not match "
            "activity type of activity command 'chat'") in str(result.replay_failure)


@pytest.mark.parametrize(("name", "end"), [
    ("cancelled_researcher_turn", EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED),
    ("cancelled_parallel_steps", EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED),
    # Recorded before CANCELLED_CALL_PATCH: the cancelled model call failed the run, and replays so.
    ("cancelled_researcher_turn_before_cancel_patch", EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED),
])
def test_a_run_cancelled_during_a_model_call_ends_cancelled_behind_its_patch(name: str, end: EventType.ValueType,
                                                                             ) -> None:
    events = load(HISTORIES / f"{name}.json").events
    assert events[-1].event_type == end
    patches = [payload.data for event in events if event.HasField("marker_recorded_event_attributes")
               for payload in event.marker_recorded_event_attributes.details["patch-data"].payloads]
    patched = any(f'"id":"{CANCELLED_CALL_PATCH}"'.encode() in data for data in patches)
    assert patched == (end == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED)


@pytest.mark.parametrize("name", ["review_timeout_cancel", "budget_timeout_cancel"])
@pytest.mark.parametrize("before", [False, True])
def test_a_run_that_decides_to_cancel_ends_cancelled_on_the_server_behind_its_patch(name: str, before: bool) -> None:
    events = load(HISTORIES / f"{name}{'_before_cancel_itself' if before else ''}.json").events
    kinds = [event.event_type for event in events]
    if before:  # it completed, with the outcome "cancelled" in its result
        assert kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
        return
    asked = [event.activity_task_scheduled_event_attributes.activity_type.name for event in events
             if event.HasField("activity_task_scheduled_event_attributes")][-1]
    assert asked == "cancel_itself" and kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds  # its completion races no workflow task
    requested = next(event.workflow_execution_cancel_requested_event_attributes for event in events
                     if event.HasField("workflow_execution_cancel_requested_event_attributes"))
    assert "cancelled" in requested.cause  # the reason is the run's own words


def test_the_reasked_history_asked_the_planner_twice_behind_its_patch() -> None:
    history = load(HISTORIES / "reasked_plan.json")
    summaries = [event.user_metadata.summary.data.decode() for event in history.events
                 if event.HasField("activity_task_scheduled_event_attributes")]
    assert [summary for summary in summaries if "planner" in summary] == ['"planner · v1"', '"planner · v1 · re-ask"']
    markers = [event.marker_recorded_event_attributes for event in history.events
               if event.HasField("marker_recorded_event_attributes")]
    assert [b"plan-reask" in marker.details["patch-data"].payloads[0].data for marker in markers] == [True]


def test_the_no_research_history_waited_for_review_and_ran_no_step() -> None:
    history = load(HISTORIES / "no_research_review.json")
    summaries = [event.user_metadata.summary.data.decode() for event in history.events
                 if event.HasField("activity_task_scheduled_event_attributes")]
    assert not [summary for summary in summaries if "step" in summary]
    signals = [event.workflow_execution_signaled_event_attributes.signal_name for event in history.events
               if event.HasField("workflow_execution_signaled_event_attributes")]
    assert signals == ["plan_feedback"]


def test_the_cli_replays_every_workflow_type(capsys: pytest.CaptureFixture[str]) -> None:
    """``starter.py replay --file`` knows the prompt enhancer's runs too, not only research runs."""
    assert starter.main(["replay", "--file", str(HISTORIES / "prompt_enhance.json")]) == 0
    assert "Replay OK" in capsys.readouterr().out
