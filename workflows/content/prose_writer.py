"""``ProseWriterWorkflow``: DeerFlow's "Ask AI" edits (continue, improve, shorter, longer, fix, zap).

One ``chat`` turn with the option's prompt. The API server streams the turn's token previews to
the editor as they come (server/content.py) and then the rest of the final text, so the durable
answer is the run's result while the editor still sees the text grow.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from workflows.calls.inputs import decode_input
    from workflows.calls.model_calls import ask
    from workflows.content.flow_usage import CountedFlow
    from workflows.contracts.prose import PROSE_WORKFLOW, ProseRequest, ProseResult


@workflow.defn(name=PROSE_WORKFLOW)
class ProseWriterWorkflow(CountedFlow):
    @workflow.run
    async def run(self, raw: RawValue) -> ProseResult:
        request = decode_input(raw, ProseRequest, workflow.payload_converter())
        text = await ask(f"prose/{request.option.value}", request.message(), self.usage,
                         f"prose writer · {request.option.value}")
        return ProseResult(text=text, usage=self.usage)
