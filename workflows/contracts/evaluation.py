"""Report evaluation's contracts: DeerFlow's request and answer, and the model judge's reply.

The judge's reply is model output, so it is parsed defensively: scores clamped to 0-10, lists cut
to a few short items, and an unparsable reply scored as DeerFlow scores one (all fives, said so).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, StrictBool, StrictStr, field_validator

from workflows.contracts.base import Contract
from workflows.contracts.report_metrics import ReportMetrics, compute_metrics, grade, metrics_score
from workflows.contracts.usage import Usage
from workflows.text.reply_json import reply_json

EVALUATOR_WORKFLOW = "ReportEvaluationWorkflow"
# The hard ceiling of any content flow's text; the API server's operator cap
# (DEERFLOW_WEB_MAX_CONTENT_BYTES) is usually lower.
MAX_CONTENT_CHARS = 1_000_000
MAX_QUERY_CHARS = 8_000
JUDGE_REPORT_CHARS = 15_000  # DeerFlow sends the judge at most this much of the report
CRITERIA = {"factual_accuracy": 0.25, "completeness": 0.20, "coherence": 0.20, "relevance": 0.15,
            "citation_quality": 0.10, "writing_quality": 0.10}
MAX_ITEMS = 5
MAX_ITEM_CHARS = 500


class EvaluateRequest(Contract):
    """DeerFlow's body: the report, its question, its style (lower-case, or "default")."""

    model_config = ConfigDict(extra="ignore")

    content: StrictStr = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    query: StrictStr = Field(default="", max_length=MAX_QUERY_CHARS)
    report_style: StrictStr | None = Field(default="default", max_length=40)
    use_llm: StrictBool = False

    @field_validator("report_style")
    @classmethod
    def _style(cls, value: str | None) -> str:
        return (value or "default").lower()


class MeasureRequest(Contract):
    """Input of the ``measure_report`` activity: the report as the request sent it, and its style."""

    report: str
    style: str


class MeasuredReport(Contract):
    """DeerFlow's metrics of a report and the score they give."""

    metrics: ReportMetrics
    score: float


def measure(request: MeasureRequest) -> MeasuredReport:
    """The metrics and their score (linear in the report: workflows/contracts/report_metrics.py)."""
    metrics = compute_metrics(request.report, request.style)
    return MeasuredReport(metrics=metrics, score=metrics_score(metrics, request.style))


class LlmEvaluation(Contract):
    """DeerFlow's ``llm_evaluation``."""

    scores: dict[str, int]
    overall_score: float
    weighted_score: float
    strengths: list[str] = Field(default_factory=list)
    weaknesses: list[str] = Field(default_factory=list)
    suggestions: list[str] = Field(default_factory=list)


class EvaluationResult(Contract):
    """DeerFlow's answer (``metrics``, ``score``, ``grade``, with the model: ``llm_evaluation``, ``summary``)."""

    metrics: ReportMetrics
    score: float
    grade: str
    llm_evaluation: LlmEvaluation | None = None
    summary: str | None = None
    usage: Usage = Field(default_factory=Usage)

    def answer(self) -> dict[str, Any]:
        """The JSON DeerFlow's UI reads (no usage)."""
        return self.model_dump(mode="json", exclude={"usage"})


def _clamp(value: Any) -> int:
    try:
        return max(0, min(10, round(float(value))))
    except (TypeError, ValueError, OverflowError):
        return 0


def _items(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [str(item)[:MAX_ITEM_CHARS] for item in value[:MAX_ITEMS] if str(item).strip()]


def _json_object(reply: str) -> dict[str, Any] | None:
    try:
        value = reply_json(reply)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_judgement(reply: str) -> LlmEvaluation:
    """The judge's reply as DeerFlow's ``llm_evaluation``; weighted score over the six criteria."""
    parsed = _json_object(reply)
    if parsed is None or not isinstance(parsed.get("scores"), dict):
        parsed = {"scores": dict.fromkeys(CRITERIA, 5), "overall_score": 5,
                  "strengths": ["Unable to parse evaluation"], "weaknesses": ["Evaluation parsing failed"],
                  "suggestions": ["Please re-run evaluation"]}
    scores = {name: _clamp(parsed["scores"].get(name)) for name in CRITERIA}
    weighted = round(sum(scores[name] * weight for name, weight in CRITERIA.items()) / sum(CRITERIA.values()), 2)
    return LlmEvaluation(scores=scores, overall_score=_clamp(parsed.get("overall_score")), weighted_score=weighted,
                         strengths=_items(parsed.get("strengths")), weaknesses=_items(parsed.get("weaknesses")),
                         suggestions=_items(parsed.get("suggestions")))


def combine(metrics: ReportMetrics, metric_score: float, judged: LlmEvaluation | None, usage: Usage,
            ) -> EvaluationResult:
    """DeerFlow's final score: 40 % metrics, 60 % the judge's weighted score (when it scored at all)."""
    if judged is None:
        return EvaluationResult(metrics=metrics, score=metric_score, grade=grade(metric_score), usage=usage)
    score = round(metric_score * 0.4 + judged.weighted_score * 0.6, 2) if judged.overall_score > 0 else metric_score
    letter = grade(score)
    return EvaluationResult(metrics=metrics, score=score, grade=letter, llm_evaluation=judged,
                            summary=summary(metrics, judged, score, letter), usage=usage)


def summary(metrics: ReportMetrics, judged: LlmEvaluation, score: float, letter: str) -> str:
    """DeerFlow's human-readable summary."""
    lines = [f"Report Grade: {letter} ({score}/10)", "", "**Automated Metrics:**",
             f"- Word Count: {metrics.word_count}", f"- Citations: {metrics.citation_count}",
             f"- Unique Sources: {metrics.unique_sources}", f"- Images: {metrics.image_count}",
             f"- Section Coverage: {metrics.section_coverage_score * 100:.0f}%"]
    if metrics.sections_missing:
        lines.append(f"- Missing Sections: {', '.join(metrics.sections_missing)}")
    lines += ["", "**LLM Evaluation:**"]
    lines += [f"- {name.replace('_', ' ').title()}: {value}/10" for name, value in judged.scores.items()]
    for heading, items in (("Strengths", judged.strengths), ("Areas for Improvement", judged.weaknesses)):
        if items:
            lines += ["", f"**{heading}:**", *(f"- {item}" for item in items[:3])]
    return "\n".join(lines)
