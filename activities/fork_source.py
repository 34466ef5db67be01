"""``read_fork_source``: a fork reads the state of the run it forks, from the Temporal server.

The state is the source's ``checkpoint`` query, which a worker answers by replaying the source's
history with this code: what the source's own workflow made of its activities' results, validated
by its contracts (``RunState``) on the way back. The fork's request names only the source and the
point; nothing of the state comes from whoever started the fork.

A source that does not exist (any more), is no research run, or is the fork itself is refused for
good; a query no worker answered in time is retried.
"""

from __future__ import annotations

from pydantic import ValidationError
from temporalio import activity
from temporalio.client import WorkflowQueryFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from runtime.research_client import checkpoint
from workflows.contracts.fork_point import ForkPoint
from workflows.contracts.research import WORKFLOW_TYPE
from workflows.research.run_state import RunState

REFUSED = "ForkSourceRefused"


@activity.defn(name="read_fork_source")
async def read_fork_source(point: ForkPoint) -> RunState:
    info = activity.info()
    if point.workflow_id == info.workflow_id:
        raise ApplicationError("a run cannot be forked from itself", type=REFUSED, non_retryable=True)
    handle = activity.client().get_workflow_handle(point.workflow_id, run_id=point.run_id)
    try:
        description = await handle.describe()
    except RPCError as error:
        if error.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise ApplicationError(f"no research run {point.workflow_id} (the server does not keep it, or "
                                   "never had it)", type=REFUSED, non_retryable=True) from None
        raise
    if description.workflow_type != WORKFLOW_TYPE:
        raise ApplicationError(f"no research run {point.workflow_id} (it is a {description.workflow_type})",
                               type=REFUSED, non_retryable=True)
    try:
        return await checkpoint(handle)
    except WorkflowQueryFailedError as error:
        raise ApplicationError(f"the state of run {point.workflow_id} could not be read: {error.message}",
                               type=REFUSED, non_retryable=True) from None
    except ValidationError as error:  # not the state this code's runs keep
        raise ApplicationError(f"the state of run {point.workflow_id} is not a run's state: "
                               f"{error.error_count()} error(s)", type=REFUSED, non_retryable=True) from None
