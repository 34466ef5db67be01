"""``PromptEnhancerWorkflow``: DeerFlow's prompt enhancer, one model turn as a workflow of its own.

Why a workflow for one call: the model call then has the ``chat`` activity's retries, timeouts
and provider-error sorting like every other turn, runs on any worker, and is visible in the Web
UI; the API server (``POST /api/prompt/enhance``) only starts it and waits for the answer.

The input arrives undecoded and is validated here (workflows/contracts/enhance.py: sizes, style), so a bad
request ends the run at once as Failed with the reason instead of failing its workflow task for ever.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from workflows.calls.inputs import decode_input
    from workflows.calls.model_calls import chat
    from workflows.calls.queues import OWN_QUEUES
    from workflows.content.flow_usage import CountedFlow
    from workflows.contracts.chat import ChatMessage, ChatRequest
    from workflows.contracts.enhance import ENHANCER_WORKFLOW, EnhanceRequest, EnhanceResult, enhanced_text


@workflow.defn(name=ENHANCER_WORKFLOW)
class PromptEnhancerWorkflow(CountedFlow):
    @workflow.run
    async def run(self, raw: RawValue) -> EnhanceResult:
        request = decode_input(raw, EnhanceRequest, workflow.payload_converter())
        turn = ChatRequest(prompt="prompt_enhancer",
                           prompt_vars={"CURRENT_TIME": workflow.now().isoformat(timespec="seconds"),
                                        "report_style": request.report_style.value},
                           messages=[ChatMessage(role="user", content=request.message())])
        response = await chat(turn, self.usage, summary="prompt enhancer", routing=OWN_QUEUES)
        return EnhanceResult(result=enhanced_text(response.message.content, request.prompt), usage=self.usage)
