"""``POST /api/prompt/enhance``: DeerFlow's prompt enhancer, run as ``PromptEnhancerWorkflow``.

The body is validated with the workflow's own request model before anything starts (a 400 with the
fields named); the run gets an execution timeout, so one nobody waits for any more ends on its own;
a run that fails or takes too long is a JSON error (DeerFlow's UI then keeps the text unchanged).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowFailureError

from runtime.run_memo import flow_memo
from server.security import RequestError
from workflows.calls.errors import failure_message
from workflows.contracts.decisions import Actor
from workflows.contracts.enhance import ENHANCER_WORKFLOW, EnhanceRequest, EnhanceResult
from workflows.contracts.research import TASK_QUEUE

# How long a request waits for the enhanced prompt, and how long its run may take at all.
WAIT = timedelta(seconds=90)


async def enhance(client: Client, body: Any, who: Actor) -> dict[str, str]:
    request = EnhanceRequest.model_validate(body)
    handle = await client.start_workflow(
        ENHANCER_WORKFLOW, request, id=f"prompt-enhance-{uuid.uuid4().hex[:16]}", task_queue=TASK_QUEUE,
        execution_timeout=WAIT, result_type=EnhanceResult, static_summary="Prompt enhancer (web)",
        memo=flow_memo(who))
    try:
        result = await asyncio.wait_for(handle.result(), WAIT.total_seconds())
    except WorkflowFailureError as error:
        raise RequestError(f"the prompt enhancer failed: {failure_message(error.cause)}", 502) from error
    except TimeoutError as error:
        raise RequestError("the prompt enhancer did not answer in time (is a worker running?)", 504) from error
    return {"result": result.result}
