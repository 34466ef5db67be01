"""Bad start inputs and forged continuation state (issue #8, items 5 and 7), on the time-skipping server.

Every bad input must end the run at once as Failed with a message naming the field, never leave
it Running in a workflow-task failure loop; a checkpoint may only come from the run's predecessor.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from storage.subtrees import ENCODING as SUBTREES
from tests.support.runs import STARTED, cancelled_status, run_id
from workflows.contracts.plan import Plan, Step
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchRequest, ResearchResult
from workflows.contracts.run_config import RunConfig
from workflows.contracts.status import Phase, RunProgress, RunStatus
from workflows.research.run_input import parse_inputs
from workflows.research.run_state import RunContinuation, RunState

DEEP_JSON = RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"[" * 3000 + b"]" * 3000))
FORGED = RunState(
    plan=Plan(title="forged", steps=[Step(title="s")]), plan_iterations=1, locale="en-US", planner_messages=[],
    observations=[], status=RunProgress(phase=Phase.RESEARCHING), config=RunConfig(agent_recursion_limit=1000),
)

# (start arguments, text the failure message must contain)
BAD_INPUTS: dict[str, tuple[list[Any], str]] = {
    "question_not_a_string": ([{"question": 123}], "question: Input should be a valid string"),
    "empty_object": ([{}], "question: Field required"),
    "array": ([[]], "input: Input should be an object"),
    "bare_string": (["What is rain?"], "input: Input should be an object"),
    "unknown_report_style": ([{"question": "q", "report_style": "poetry"}], "report_style: Input should be"),
    "max_step_num_0": ([{"question": "q", "max_step_num": 0}], "max_step_num: Input should be greater"),
    "max_step_num_negative": ([{"question": "q", "max_step_num": -1}], "max_step_num: Input should be greater"),
    "max_step_num_10000": ([{"question": "q", "max_step_num": 10000}], "max_step_num: Input should be less"),
    "malformed_review_timeout": ([{"question": "q", "review_timeout": "soon"}], "review_timeout: "),
    "two_inputs": ([{"question": "q"}, {"question": "r"}], "expected one input"),
    "no_input": ([], "expected one input"),
    "json_null": ([None], "must be a JSON object"),
    "deep_json": ([DEEP_JSON], "recursion limit exceeded"),
    "checkpoint_in_request": ([{"question": "q", "checkpoint": FORGED.model_dump(mode="json")}],
                              "'checkpoint' cannot be set by a client"),
    "forged_continuation": ([{"question": "q"}, RunContinuation(checkpoint=FORGED, written_by_run_id="guess")],
                            "expected one input"),
}


async def start_raw(client: Client, *args: Any, workflow: str = WORKFLOW_TYPE) -> WorkflowHandle:
    handle = await client.start_workflow(workflow, args=list(args), id=run_id("hostile"), task_queue=TASK_QUEUE,
                                         result_type=ResearchResult)
    STARTED.append(handle)
    return handle


async def failure_of(handle: WorkflowHandle) -> ApplicationError:
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert isinstance(failed.value.cause, ApplicationError)
    return failed.value.cause


@pytest.mark.parametrize("name", BAD_INPUTS)
async def test_a_bad_start_input_fails_the_run_at_once_naming_the_field(time_worker: Client, name: str) -> None:
    args, expected = BAD_INPUTS[name]
    handle = await start_raw(time_worker, *args)
    error = await failure_of(handle)

    assert error.type == "InvalidRequest" and error.non_retryable
    assert expected in error.message, error.message
    assert "errors.pydantic.dev" not in error.message
    assert (await handle.describe()).status is WorkflowExecutionStatus.FAILED
    history = await handle.fetch_history()
    kinds = [event.event_type for event in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in kinds
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in kinds, "nothing may run on a bad input"
    status = await handle.query("status", result_type=RunStatus)
    assert status.phase is Phase.FAILED and status.error == error.message


async def test_an_unknown_workflow_type_on_the_queue_fails_at_once(time_worker: Client) -> None:
    error = await failure_of(await start_raw(time_worker, {"question": "q"}, workflow="NotOurs"))
    assert error.type == "UnknownWorkflowType" and "NotOurs" in error.message


async def test_a_request_over_the_payload_threshold_still_runs(time_worker: Client) -> None:
    handle = await start_raw(time_worker, {"question": "hello" + " !" * 20_000})
    # The run was accepted and went its normal way (here: a plan nobody reviewed in time, so cancelled).
    status = await cancelled_status(handle)
    assert status.outcome is Outcome.CANCELLED, status.error
    history = await handle.fetch_history()
    [stored] = history.events[0].workflow_execution_started_event_attributes.input.payloads
    assert len(stored.data) < 1_000, "the request should have been stored outside history"


def raw(value: Any) -> RawValue:
    return RawValue(pydantic_data_converter.payload_converter.to_payloads([value])[0])


def test_a_continuation_is_accepted_only_from_the_run_that_wrote_it() -> None:
    continuation = RunContinuation(checkpoint=FORGED, written_by_run_id="run-1")
    inputs = [raw({"question": "q"}), raw(continuation)]
    converter = pydantic_data_converter.payload_converter

    request, accepted = parse_inputs(inputs, converter, continued_run_id="run-1")
    assert request.question == "q" and accepted == continuation
    # A retried or cron run continues another run id; a client-started run continues none.
    for predecessor in ("run-2", None):
        with pytest.raises(ApplicationError) as rejected:
            parse_inputs(inputs, converter, continued_run_id=predecessor)
        assert rejected.value.type == "InvalidRequest" and rejected.value.non_retryable
    with pytest.raises(ApplicationError, match="checkpoint: Field required"):
        parse_inputs([raw({"question": "q"}), raw({"written_by_run_id": "run-1"})], converter, "run-1")


def test_older_clients_null_retired_fields_are_accepted() -> None:
    # Clients built on the earlier request model serialise every field, so they send these as null.
    request = ResearchRequest.model_validate({"question": "q", "checkpoint": None, "mcp_settings": None})
    assert request.question == "q"


@pytest.mark.parametrize("reference", ["whole_payload", "subtree"])
@pytest.mark.parametrize("forgery", ["unknown_blob", "path_in_claim"])
async def test_a_forged_storage_reference_fails_the_run_at_once(time_worker: Client, forgery: str,
                                                                reference: str) -> None:
    # A genuine claim-checked start input, then the same reference pointing at a blob this store never
    # wrote, or at a path; or a hand-made subtree reference (storage/subtrees.py) doing the same: the
    # SDK decodes payloads before workflow code runs; the worker's converter hands the one it cannot
    # decode on as undecodable (runtime/message_payloads.py), so the run fails as an invalid request
    # quoting the store's refusal, instead of retrying its workflow task for ever.
    genuine = await start_raw(time_worker, {"question": "hello" + " !" * 20_000})
    await cancelled_status(genuine)  # a plan nobody reviewed in time
    [stored] = (await genuine.fetch_history()).events[0].workflow_execution_started_event_attributes.input.payloads
    digest = json.loads(stored.data)["claimData"]["hash_value"]
    forged_digest = "0" * 64 if forgery == "unknown_blob" else "../" * 10 + "etc/passwd"
    forged = Payload()
    forged.CopyFrom(stored)
    forged.data = stored.data.replace(digest.encode(), forged_digest.encode())
    if reference == "subtree":
        forged = Payload(metadata={"encoding": SUBTREES},
                         data=json.dumps({"question": {"$subtree": forged_digest}}, separators=(",", ":")).encode())
    handle = await start_raw(time_worker, RawValue(forged))
    failure = await asyncio.wait_for(failure_of(handle), 30)
    assert failure.type == "InvalidRequest" and "the payload could not be decoded" in failure.message, failure
    assert "InvalidPayloadReference" in failure.message, failure
    assert not [event for event in (await handle.fetch_history()).events
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
