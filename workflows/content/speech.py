"""``SpeechWorkflow``: DeerFlow's ``POST /api/tts``, one ``speak`` activity as a workflow.

The same activity the podcast uses, so the endpoint has its retries and shows in the Web UI,
and the audio goes to the blob store like every other content flow's file.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import SPEAK, execute
    from workflows.calls.inputs import decode_input
    from workflows.calls.queues import OWN_QUEUES
    from workflows.contracts.artefact import ArtefactRef
    from workflows.contracts.podcast import SpeechRequest

SPEECH_WORKFLOW = "SpeechWorkflow"


@workflow.defn(name=SPEECH_WORKFLOW)
class SpeechWorkflow:
    @workflow.run
    async def run(self, raw: RawValue) -> ArtefactRef:
        return await execute(SPEAK, decode_input(raw, SpeechRequest, workflow.payload_converter()), ArtefactRef,
                             routing=OWN_QUEUES)
