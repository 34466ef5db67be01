"""A workflow that schedules one activity with a summary, for tests/test_workflow_runner.py.

Its own module, importing only the SDK, so the workflow sandbox can load it as a worker would.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

CONTEXT_PROBE_QUEUE = "context-probe"


@activity.defn
async def echo(text: str) -> str:
    return text


@workflow.defn
class ContextProbe:
    @workflow.run
    async def run(self, text: str) -> tuple[str, bool]:
        """The activity's answer, and whether the workflow's own code ran inside the sandbox."""
        echoed = await workflow.execute_activity(echo, text, summary="echo the text",
                                                 start_to_close_timeout=timedelta(seconds=30))
        return echoed, workflow.unsafe.in_sandbox()
