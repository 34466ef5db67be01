"""Where a fork of a research run starts: the run it forks, the stage, and what the person changed.

A fork is a new run that reuses the results its source had before that point (no model call,
search or crawl before it is paid again) and goes on from there, with its own report style, locale
and edit. The fork's request names only this point; the state it reuses is read by the fork's own
worker from the source run (workflows/research/fork.py), never sent by a client.

What the edit means at each stage:

- ``plan``: plan feedback, as a review's ``[EDIT_PLAN] …``: the planner plans again from the
  source's coordinator handoff and background investigation, with the edit on the source's plan;
- ``step N``: step N's new description (the steps before it are reused, N and after run again);
- ``report``: an instruction to the reporter (what to stress, what to leave out).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field, field_validator, model_validator

from workflows.contracts.base import Contract

MAX_EDIT_CHARS = 10_000


class ForkStage(StrEnum):
    PLAN = "plan"
    STEP = "step"
    REPORT = "report"


class ForkPoint(Contract):
    """The run a fork starts from (a research run's workflow id, and the run of it the door read) and
    where; ``step`` counts from 1, as people count steps."""

    model_config = ConfigDict(extra="forbid")

    workflow_id: str = Field(min_length=1, max_length=255)
    run_id: str | None = Field(default=None, min_length=1, max_length=64)
    stage: ForkStage
    step: int | None = Field(default=None, ge=1, le=20)
    edit: str | None = Field(default=None, max_length=MAX_EDIT_CHARS)

    @field_validator("edit")
    @classmethod
    def _edit_says_something(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("the edit is blank")
        return value.strip() if value is not None else None

    @model_validator(mode="after")
    def _step_only_at_a_step(self) -> ForkPoint:
        if (self.stage is ForkStage.STEP) != (self.step is not None):
            raise ValueError("a fork from a step names the step (1, 2, …), and only such a fork names one")
        return self

    @property
    def at(self) -> str:
        """Where, in a few words: ``plan``, ``step 2``, ``report``."""
        return f"step {self.step}" if self.stage is ForkStage.STEP else self.stage.value

    @property
    def label(self) -> str:
        """Where, in a sentence: ``the plan``, ``step 2``, ``the report``."""
        return self.at if self.stage is ForkStage.STEP else f"the {self.stage.value}"
