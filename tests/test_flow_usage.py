"""The content flows' usage on the time-skipping server (issue #48 item 5): each flow that calls the
model keeps what its calls used, in its result and, for a flow that ended without one, in its
``usage`` query, which ``starter.py costs`` reads (tests/test_costs_e2e.py: costs equals the metric).
"""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client, WorkflowFailureError

from offline.model_server import FakeModelServer, Fault
from tests.support.runs import SAMPLE_REPORT
from workflows.catalog import WORKFLOWS
from workflows.content.flow_usage import COUNTED_FLOWS, USAGE_QUERY, CountedFlow
from workflows.contracts.research import TASK_QUEUE
from workflows.contracts.slides import SLIDES_WORKFLOW, SlidesRequest, SlidesResult
from workflows.contracts.usage import Usage

pytestmark = pytest.mark.timeout(60)
CALLS_THE_MODEL = {"ProseWriterWorkflow", "ReportEvaluationWorkflow", "SlideComposerWorkflow", "PodcastWorkflow",
                   "PromptEnhancerWorkflow"}


def test_every_flow_that_calls_the_model_keeps_its_usage_where_costs_reads_it() -> None:
    counted = {workflow.__temporal_workflow_definition.name for workflow in WORKFLOWS  # type: ignore[attr-defined]
               if issubclass(workflow, CountedFlow)}
    assert counted == set(COUNTED_FLOWS) == CALLS_THE_MODEL


async def test_a_flow_that_fails_after_its_calls_still_says_what_they_used(
        time_worker: Client, model_server: FakeModelServer) -> None:
    model_server.inject(*[Fault.empty(agent="presentation_composer")] * 3)
    handle = await time_worker.start_workflow(SLIDES_WORKFLOW, SlidesRequest(content=SAMPLE_REPORT),
                                              id=f"slides-{uuid.uuid4().hex[:8]}", task_queue=TASK_QUEUE,
                                              result_type=SlidesResult)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    spent = await handle.query(USAGE_QUERY, result_type=Usage)
    assert spent.llm_calls == 3 and spent.input_tokens > 0, spent

    done = await time_worker.start_workflow(SLIDES_WORKFLOW, SlidesRequest(content=SAMPLE_REPORT),
                                            id=f"slides-{uuid.uuid4().hex[:8]}", task_queue=TASK_QUEUE,
                                            result_type=SlidesResult)
    result = await done.result()
    assert result.usage.llm_calls == 1 and await done.query(USAGE_QUERY, result_type=Usage) == result.usage
