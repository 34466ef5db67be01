"""``cancel_itself``: a run that decides to end cancelled asks the server to cancel it.

A run ends cancelled by its own decision when a person chooses "cancel" at its budget pause, or when
nobody reviews its plan or decides at its budget in time and the request says to cancel then. A
workflow cannot end Cancelled by itself: the SDK ends it so only after a cancel request, and the
server refuses a run's request to cancel itself (ExternalWorkflowExecutionNotFound). So it
completed, and every view that reads how a run ended from the server (``starter.py list`` and
``watch``, the page, the Web UI, ``temporal workflow list``, ``costs``) said completed (issue #49).
This activity sends the request for it, through the worker's client, to the run that scheduled it
and no other: the run picks only the reason, which the server keeps on the request.

The activity then waits, beating, until the run cancels it on its way out (the run waits for that:
``CANCEL_ITSELF``'s cancellation type). Had it returned at once, its completion would race the
run's last workflow task, which the server then refuses once (an "unhandled command" in the
history of every such run).
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from runtime.heartbeat import heartbeating

# The run's cancel reaches this call within a beat or two; past this, the run completes instead.
ACKNOWLEDGED_WITHIN_SECONDS = 60.0


@activity.defn(name="cancel_itself")
@heartbeating
async def cancel_itself(reason: str) -> None:
    info = activity.info()
    await activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id).cancel(reason=reason)
    await asyncio.sleep(ACKNOWLEDGED_WITHIN_SECONDS)  # the run cancels this call as it ends
