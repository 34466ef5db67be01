"""``ReportEvaluationWorkflow``: DeerFlow's report evaluation (metrics, and the model as judge).

The metrics are pure code (workflows/contracts/report_metrics.py) run by the ``measure_report`` activity:
the report is anybody's text, so its scoring stays out of workflow code (runs recorded before the
activity computed them here, and still do on replay). The judge, when asked for, is one ``chat``
turn with the ``report_judge`` prompt, so it has the model call's retries and timeouts and shows in
the Web UI. A judge that fails for good leaves the metrics-only answer, as DeerFlow's does.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import MEASURE_REPORT, execute
    from workflows.calls.inputs import decode_input
    from workflows.calls.model_calls import ask
    from workflows.calls.queues import OWN_QUEUES
    from workflows.content.flow_usage import CountedFlow
    from workflows.contracts.evaluation import (
        EVALUATOR_WORKFLOW,
        JUDGE_REPORT_CHARS,
        EvaluateRequest,
        EvaluationResult,
        LlmEvaluation,
        MeasuredReport,
        MeasureRequest,
        combine,
        measure,
        parse_judgement,
    )

# The metrics moved from workflow code into the ``measure_report`` activity (issue #42).
METRICS_ACTIVITY_PATCH = "report-metrics-activity"


@workflow.defn(name=EVALUATOR_WORKFLOW)
class ReportEvaluationWorkflow(CountedFlow):
    @workflow.run
    async def run(self, raw: RawValue) -> EvaluationResult:
        request = decode_input(raw, EvaluateRequest, workflow.payload_converter())
        style = request.report_style or "default"
        measuring = MeasureRequest(report=request.content, style=style)
        measured = (await execute(MEASURE_REPORT, measuring, MeasuredReport, routing=OWN_QUEUES)
                    if workflow.patched(METRICS_ACTIVITY_PATCH) else measure(measuring))
        judged: LlmEvaluation | None = None
        if request.use_llm:
            message = (f"Original research query: {request.query}\nReport style: {style}\n\nReport to evaluate:\n\n"
                       f"{request.content[:JUDGE_REPORT_CHARS]}")
            try:
                reply = await ask("report_judge", message, self.usage, "report judge")
            except ActivityError:
                workflow.logger.warning("The report judge failed; answering with the metrics alone")
            else:
                judged = parse_judgement(reply)
        return combine(measured.metrics, measured.score, judged, self.usage)
