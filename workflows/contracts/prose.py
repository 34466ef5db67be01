"""Prose editing's contracts: DeerFlow's request (text, option, command) and the edited text.

Each option is a prompt of its own (``prompts/prose/<option>.md``); an unknown option, or a zap
without its command, is refused before anything starts.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field, StrictStr, model_validator

from workflows.contracts.base import Contract
from workflows.contracts.evaluation import MAX_CONTENT_CHARS
from workflows.contracts.usage import Usage

PROSE_WORKFLOW = "ProseWriterWorkflow"
MAX_COMMAND_CHARS = 2_000


class ProseOption(StrEnum):
    CONTINUE = "continue"
    IMPROVE = "improve"
    SHORTER = "shorter"
    LONGER = "longer"
    FIX = "fix"
    ZAP = "zap"


class ProseRequest(Contract):
    """DeerFlow's body: ``prompt`` is the text to work on, ``command`` the zap's instruction."""

    model_config = ConfigDict(extra="ignore")

    prompt: StrictStr = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    option: ProseOption
    command: StrictStr = Field(default="", max_length=MAX_COMMAND_CHARS)

    @model_validator(mode="after")
    def _zap_has_a_command(self) -> ProseRequest:
        if self.option is ProseOption.ZAP and not self.command.strip():
            raise ValueError("option zap needs a command")
        return self

    def message(self) -> str:
        if self.option is ProseOption.ZAP:
            return f"Text:\n{self.prompt}\n\nCommand: {self.command.strip()}"
        return f"Text:\n{self.prompt}"


class ProseResult(Contract):
    text: str
    usage: Usage = Field(default_factory=Usage)
