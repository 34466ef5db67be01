"""``ReportEvaluationWorkflow``: DeerFlow's report evaluation (metrics, and the model as judge).

The metrics are pure code computed here (workflows/report_metrics.py); the judge, when asked for,
is one ``chat`` turn with the ``report_judge`` prompt, so it has the model call's retries and
timeouts and shows in the Web UI. A judge that fails for good leaves the metrics-only answer, as
DeerFlow's does.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows.evaluation import (
        EVALUATOR_WORKFLOW,
        JUDGE_REPORT_CHARS,
        EvaluateRequest,
        EvaluationResult,
        LlmEvaluation,
        combine,
        parse_judgement,
    )
    from workflows.model_calls import ask
    from workflows.models import Usage
    from workflows.report_metrics import compute_metrics, metrics_score
    from workflows.run_input import decode_input


@workflow.defn(name=EVALUATOR_WORKFLOW)
class ReportEvaluationWorkflow:
    @workflow.run
    async def run(self, raw: RawValue) -> EvaluationResult:
        request = decode_input(raw, EvaluateRequest, workflow.payload_converter())
        style = request.report_style or "default"
        metrics = compute_metrics(request.content, style)
        usage = Usage()
        judged: LlmEvaluation | None = None
        if request.use_llm:
            message = (f"Original research query: {request.query}\nReport style: {style}\n\nReport to evaluate:\n\n"
                       f"{request.content[:JUDGE_REPORT_CHARS]}")
            try:
                reply = await ask("report_judge", message, usage, "report judge")
            except ActivityError:
                workflow.logger.warning("The report judge failed; answering with the metrics alone")
            else:
                judged = parse_judgement(reply)
        return combine(metrics, metrics_score(metrics, style), judged, usage)
