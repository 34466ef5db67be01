"""Which of a run's calls the server is retrying, read from ``describe()``'s pending activities.

Why from the server: a retried attempt is invisible to the workflow (it sees only the final
outcome), so its status cannot say it; the server keeps each pending activity's attempt and last
failure. ``status``, ``watch`` and the web page show these next to the status, in the words of
``workflows/research/status_view.py: retry_line``.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse

from workflows.research.status_view import Retry


def _retry(pending: PendingActivityInfo) -> Retry | None:
    if not pending.HasField("last_failure"):
        return None  # a first attempt, not (yet) a retry
    return Retry(call=pending.activity_type.name, attempt=pending.attempt,
                 maximum_attempts=pending.maximum_attempts, last_error=pending.last_failure.message)


def retries_of(description: DescribeWorkflowExecutionResponse | Any) -> list[Retry]:
    """The calls being retried, from a raw describe response (``WorkflowExecutionDescription.raw_description``)."""
    return [retry for retry in map(_retry, description.pending_activities) if retry is not None]
