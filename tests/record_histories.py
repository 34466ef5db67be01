"""Records the reference histories in ``tests/histories/`` that the replay tests check.

    .venv/bin/python -m tests.record_histories

Run it only when a deliberate, patched workflow change needs new references; the old files
should be kept too, so that runs started on the old code stay provably replayable.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.registry import ACTIVITIES, SANDBOX_ACTIVITIES
from activities.settings import get_settings
from offline.providers import start_offline_providers
from workflows.models import TASK_QUEUE, WORKFLOW_TYPE, Phase, ResearchRequest, ResearchResult, RunStatus
from workflows.queues import SANDBOX_TASK_QUEUE
from workflows.research import DeepResearchWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"
QUESTION = "What are the prospects of solid-state batteries for electric vehicles?"


async def _wait_for_review(handle: WorkflowHandle, after: str | None) -> str:
    """Wait for a pause on a plan other than ``after``; returns that plan's title."""
    for _ in range(400):
        status = await handle.query("status", result_type=RunStatus)
        if status.phase is Phase.AWAITING_REVIEW and status.plan and status.plan.title != after:
            return status.plan.title
        await asyncio.sleep(0.05)
    raise TimeoutError("the run never paused for review")


async def record() -> None:
    from tests.conftest import TEST_SERVER as test_server

    providers = start_offline_providers()
    get_settings.cache_clear()
    HISTORIES.mkdir(exist_ok=True)
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter, test_server_existing_path=str(test_server)
    )
    try:
        async with Worker(env.client, task_queue=TASK_QUEUE, workflows=[DeepResearchWorkflow], activities=ACTIVITIES), \
                Worker(env.client, task_queue=SANDBOX_TASK_QUEUE, activities=SANDBOX_ACTIVITIES):
            scenarios = {
                "accepted_plan": (QUESTION, ["[ACCEPTED]"]),
                "edited_plan": (QUESTION, ["[EDIT_PLAN] add a step on manufacturing costs", "[ACCEPTED]"]),
                "direct_reply": ("hello", []),
            }
            for name, (question, feedback) in scenarios.items():
                handle = await env.client.start_workflow(
                    WORKFLOW_TYPE, ResearchRequest(question=question), id=f"history-{name}",
                    task_queue=TASK_QUEUE, result_type=ResearchResult,
                )
                reviewed: str | None = None
                for message in feedback:
                    reviewed = await _wait_for_review(handle, reviewed)
                    await handle.signal("plan_feedback", message)
                await handle.result()
                history = await handle.fetch_history()
                (HISTORIES / f"{name}.json").write_text(history.to_json(), encoding="utf-8")
                print(f"recorded {name}: {len(history.events)} events")
    finally:
        await env.shutdown()
        providers.stop()


if __name__ == "__main__":
    asyncio.run(record())
