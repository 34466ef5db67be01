"""The ``chat`` activity's input and output: the messages, the tools offered, the model's tool calls
and the usage of one call. The system prompt travels by name (``prompts/<name>.md``), not as text."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from workflows.contracts.base import Contract
from workflows.contracts.usage import Usage


class ToolCall(Contract):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Set when the model sent arguments that are not a JSON object; the agent loop answers
    # the call with an error message instead of running the tool.
    invalid_arguments: str | None = None


class ChatMessage(Contract):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    name: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class ToolSpec(Contract):
    """What the model sees of a tool: OpenAI function-calling shape."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelTier(StrEnum):
    BASIC = "basic"
    REASONING = "reasoning"


class ChatRequest(Contract):
    """Input of the ``chat`` activity.

    The system prompt is named, not inlined: the activity renders ``prompts/<prompt>.md`` with
    ``prompt_vars``. That keeps long prompt text out of workflow history and keeps the
    templates editable without a workflow change.
    """

    prompt: str
    prompt_vars: dict[str, str] = Field(default_factory=dict)
    messages: list[ChatMessage] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    model_tier: ModelTier = ModelTier.BASIC
    json_mode: bool = False
    # A named JSON schema the reply must follow (with json_mode): the activity sends it as
    # ``response_format: json_schema`` where the provider takes it. Named, so history stays small.
    response_schema: Literal["plan"] | None = None
    # JSON tool mode: what a ``url`` argument may be, the newest URLs the step found that no call has
    # used yet (workflows/research/found_urls.py); the model's own words never make one.
    url_choices: list[str] = Field(default_factory=list)


class ChatResponse(Contract):
    message: ChatMessage
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None  # the provider's: "stop", "tool_calls", "length", …
    # The reply stopped at ``output_cap`` (finish_reason "length"): kept, and handled by the caller.
    truncated: bool = False
    output_cap: int | None = None  # the max_tokens sent
