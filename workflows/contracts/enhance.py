"""The prompt enhancer's contracts: its request (DeerFlow's body, with size limits) and result.

Kept apart from the workflow so the API server validates a request with the same model before it
starts anything, and the workflow module stays small for the sandbox.
"""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, field_validator

from workflows.contracts.base import Contract
from workflows.contracts.report_style import ReportStyle
from workflows.contracts.usage import Usage

ENHANCER_WORKFLOW = "PromptEnhancerWorkflow"
MAX_PROMPT_CHARS = 8_000
MAX_CONTEXT_CHARS = 8_000
_TAGGED = re.compile(r"<enhanced_prompt>(.*?)(?:</enhanced_prompt>|$)", re.DOTALL | re.IGNORECASE)


class EnhanceRequest(Contract):
    """DeerFlow's request body (its UI sends the style upper-case); other fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    context: str = Field(default="", max_length=MAX_CONTEXT_CHARS)
    report_style: ReportStyle = ReportStyle.ACADEMIC

    @field_validator("prompt")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the prompt is empty")
        return value

    @field_validator("report_style", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    def message(self) -> str:
        context = f"\n\nAdditional context:\n{self.context.strip()}" if self.context.strip() else ""
        return f"Original prompt:\n{self.prompt.strip()}{context}"


class EnhanceResult(Contract):
    result: str
    usage: Usage = Field(default_factory=Usage)


def enhanced_text(reply: str, original: str) -> str:
    """The prompt inside the reply's tags, else the whole reply; the original if nothing is left."""
    match = _TAGGED.search(reply)
    text = (match.group(1) if match else reply).strip()
    return text or original
