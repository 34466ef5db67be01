"""``SlideComposerWorkflow``: DeerFlow's presentation, from a report to a ``.pptx``.

The composer (one ``chat`` turn, prompt ``ppt_composer``) writes the slides as JSON in a bounded
schema (workflows/contracts/slides.py); the ``render_slides`` activity writes the file with python-pptx.
The activity writes the file to the blob store; history holds only its reference. A composer
reply with no usable slide fails the run, naming why.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import RENDER_SLIDES, execute
    from workflows.calls.inputs import decode_input
    from workflows.calls.model_calls import ask
    from workflows.calls.queues import OWN_QUEUES
    from workflows.content.flow_usage import CountedFlow
    from workflows.contracts.artefact import ArtefactRef
    from workflows.contracts.slides import (
        COMPOSER_REPORT_CHARS,
        SLIDES_WORKFLOW,
        NoDeck,
        SlidesRequest,
        SlidesResult,
        deck_from_reply,
    )


@workflow.defn(name=SLIDES_WORKFLOW)
class SlideComposerWorkflow(CountedFlow):
    @workflow.run
    async def run(self, raw: RawValue) -> SlidesResult:
        request = decode_input(raw, SlidesRequest, workflow.payload_converter())
        reply = await ask("ppt_composer", request.content[:COMPOSER_REPORT_CHARS], self.usage, "slide composer",
                          {"locale": request.locale})
        try:
            deck = deck_from_reply(reply)
        except NoDeck as error:
            raise ApplicationError(str(error), type="NoDeck", non_retryable=True) from None
        pptx = await execute(RENDER_SLIDES, deck, ArtefactRef, routing=OWN_QUEUES)
        return SlidesResult(deck=deck, pptx=pptx, usage=self.usage)
