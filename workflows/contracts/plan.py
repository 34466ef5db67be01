"""A research plan: its steps and what kind of worker each needs, in DeerFlow's schema (the planner's
output, what a person reviews, what the status and the result carry)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator

from workflows.contracts.base import Contract


class StepType(StrEnum):
    """What kind of worker a plan step needs."""

    RESEARCH = "research"  # researcher: search, crawl, local documents, MCP tools
    PROCESSING = "processing"  # coder: python_repl_tool
    ANALYSIS = "analysis"  # analyst: reasoning over earlier findings, no tools


class Step(Contract):
    """One unit of work in a plan; ``execution_res`` is filled in when the step has run."""

    need_search: bool = False
    title: str
    description: str = ""
    step_type: StepType = StepType.RESEARCH
    execution_res: str | None = None
    # Indexes (from 0) of earlier steps this one needs; used when the run has parallel_steps.
    depends_on: list[int] | None = None

    @field_validator("step_type", mode="before")
    @classmethod
    def _lenient_step_type(cls, value: Any) -> Any:
        # Models write "Research" or "processing " often enough that refusing them would lose good plans.
        if isinstance(value, str):
            return value.strip().lower()
        return value


class Plan(Contract):
    """The planner's output, in DeerFlow's schema."""

    locale: str = "en-US"
    has_enough_context: bool = False
    thought: str = ""
    title: str
    steps: list[Step] = Field(default_factory=list)
