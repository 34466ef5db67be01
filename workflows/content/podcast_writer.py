"""``PodcastWorkflow``: DeerFlow's podcast, from a report to one MP3.

The script writer (one ``chat`` turn, prompt ``podcast_script_writer``) writes a two-voice script
in a bounded JSON shape; each line is spoken by its own ``speak`` activity (concurrently, so the
tools queue's limit paces them), which writes its clip to the blob store; ``join_audio`` joins
the clips in order into one MP3 there, as DeerFlow joins its chunks. Without a voice configured
the first ``speak`` fails with ``NoVoice`` and the run ends with the script and a note saying so.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import JOIN_AUDIO, SPEAK, execute
    from workflows.calls.inputs import decode_input
    from workflows.calls.model_calls import ask
    from workflows.calls.queues import OWN_QUEUES
    from workflows.calls.side_by_side import together
    from workflows.content.flow_usage import CountedFlow
    from workflows.contracts.artefact import ArtefactRef
    from workflows.contracts.podcast import (
        NO_VOICE,
        PODCAST_WORKFLOW,
        WRITER_REPORT_CHARS,
        NoScript,
        PodcastRequest,
        PodcastResult,
        SpeechRequest,
        script_from_reply,
    )


def _no_voice(error: ActivityError) -> str | None:
    cause = error.cause
    return str(cause.message) if isinstance(cause, ApplicationError) and cause.type == NO_VOICE else None


@workflow.defn(name=PODCAST_WORKFLOW)
class PodcastWorkflow(CountedFlow):
    @workflow.run
    async def run(self, raw: RawValue) -> PodcastResult:
        request = decode_input(raw, PodcastRequest, workflow.payload_converter())
        reply = await ask("podcast_script_writer", request.content[:WRITER_REPORT_CHARS], self.usage,
                          "podcast script writer")
        try:
            script = script_from_reply(reply)
        except NoScript as error:
            raise ApplicationError(str(error), type="NoScript", non_retryable=True) from None
        lines = [SpeechRequest(text=line.paragraph, speaker=line.speaker) for line in script.lines]
        try:
            # The first alone: without a voice, no other starts.
            first = await execute(SPEAK, lines[0], ArtefactRef, routing=OWN_QUEUES)
            rest = await together(*(execute(SPEAK, line, ArtefactRef, routing=OWN_QUEUES) for line in lines[1:]))
        except ActivityError as error:
            note = _no_voice(error)
            if note is None:
                raise
            return PodcastResult(script=script, note=note, usage=self.usage)
        audio = await execute(JOIN_AUDIO, [first, *rest], ArtefactRef, routing=OWN_QUEUES)
        return PodcastResult(script=script, audio=audio, usage=self.usage)
