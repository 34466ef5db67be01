"""A deploy of changed workflow code under a run paused at review (issue #12).

Why: enterprise runs wait for a reviewer for days while teams deploy. We keep every build able to
replay every open run by patching discipline (docs/changing-code.md), enforced
in CI by the replay corpus and before a deploy by ``starter.py replay``. This test plays the
operator's steps with real processes: build N pauses a run; build N+1 changes the commands the
workflow issues before that pause. Unguarded, the replay check refuses the build; guarded by
``workflow.patched``, the check passes, the new worker takes the paused run, the approval goes
through and the run completes, while new runs get the new behaviour.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from config.settings import load_settings
from offline.providers import without_provider_settings
from tests.support.checkout import copy_checkout
from tests.support.processes import DevServer, start_worker
from tests.support.runs import QUESTION, awaiting_review, run_id, wait_for
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest, ResearchResult

CHANGED = Path("workflows") / "research" / "coordination.py"
ANCHOR = ("    run.use_config(await execute(LOAD_RUN_CONFIG, list(run.request.resources), RunConfig, "
          "routing=run.routing))\n")
# A new command right after the run's first activity, i.e. before any review pause.
NEW_COMMAND = "await workflow.sleep(0.001)"
UNGUARDED = ANCHOR + f"    {NEW_COMMAND}\n"
GUARDED = ANCHOR + f"    if workflow.patched('deploy-drill'):\n        {NEW_COMMAND}\n"


def build(tmp_path: Path, name: str, change: str) -> Path:
    """A checkout of the current code whose workflow issues one more command (build N+1)."""
    checkout = copy_checkout(tmp_path / name)
    source = checkout / CHANGED
    text = source.read_text()
    assert text.count(ANCHOR) == 1, "the anchor line moved: update this test's ANCHOR"
    source.write_text(text.replace(ANCHOR, change))
    return checkout


def patches(history: WorkflowHistory) -> set[str]:
    """The patch ids a run recorded: the changes whose new branch it took."""
    return {json.loads(event.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)["id"]
            for event in history.events if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            and event.marker_recorded_event_attributes.marker_name == "core_patch"}


# Every build's worker and replayer use the test client's payload store, as a deployment shares one:
# a build's checkout would otherwise default to a store of its own, without the run's blobs.
SHARED_STORE = {"DEERFLOW_HOME": str(load_settings().home.resolve())}


def replay_check(checkout: Path, history_file: Path) -> subprocess.CompletedProcess[str]:
    """The operator's pre-deploy check: ``starter.py replay --file`` with the new build's code."""
    return subprocess.run([sys.executable, "starter.py", "replay", "--file", str(history_file)], cwd=checkout,
                          env=without_provider_settings(os.environ) | SHARED_STORE, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.timeout(240)
async def test_a_paused_run_survives_a_deploy_of_changed_workflow_code(
    dev_server: DevServer, client: Client, tmp_path: Path
) -> None:
    build_n = await start_worker(dev_server, client, tmp_path / "build-n.log", **SHARED_STORE)
    try:
        handle = await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION), id=run_id("deploy"),
                                             task_queue=TASK_QUEUE, result_type=ResearchResult)
        await wait_for(handle, awaiting_review, timeout=60)
    finally:
        build_n.stop()
    history_file = tmp_path / "paused.json"
    history_file.write_text((await handle.fetch_history()).to_json())

    unguarded, guarded = build(tmp_path, "unguarded", UNGUARDED), build(tmp_path, "guarded", GUARDED)
    refused, passed = replay_check(unguarded, history_file), replay_check(guarded, history_file)
    assert refused.returncode == 1 and "Replay FAILED" in refused.stdout, refused.stdout + refused.stderr
    assert passed.returncode == 0 and "Replay OK" in passed.stdout, passed.stdout + passed.stderr

    build_n1 = await start_worker(dev_server, client, tmp_path / "build-n1.log", repo=guarded, **SHARED_STORE)
    try:
        await handle.signal("plan_feedback", "[ACCEPTED]")
        result = await asyncio.wait_for(handle.result(), 120)
        assert result.report
        history = await handle.fetch_history()
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in [event.event_type for event in history.events]
        assert "deploy-drill" not in patches(history), "the paused run keeps build N's commands"

        fresh = await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION, auto_accept_plan=True),
                                            id=run_id("deploy-new"), task_queue=TASK_QUEUE, result_type=ResearchResult)
        assert (await asyncio.wait_for(fresh.result(), 120)).report
        assert "deploy-drill" in patches(await fresh.fetch_history()), "new runs get build N+1's behaviour"
    finally:
        build_n1.stop()
