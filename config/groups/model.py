"""The model provider: endpoints and keys per tier, client options, output caps and the agents' limit."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from config.groups.base import SettingsGroup

DEFAULT_RECURSION_LIMIT = 25


# OpenAI's own endpoint: the default of openai-python and of docker-compose.yml (model_configured).
OPENAI_PUBLIC_BASE_URL = "https://api.openai.com/v1"


class ModelSettings(SettingsGroup):
    """Any OpenAI-compatible endpoint, the reasoning tier's own block, and what one call may produce."""

    openai_base_url: str | None = Field(default=None, alias="OPENAI_BASE_URL")
    """Any OpenAI-compatible endpoint. With no key and no endpoint anywhere (environment, `.env`, conf.yaml): the
    offline demonstration model. Unset: OpenAI.
    """
    openai_api_key: str | None = Field(default=None, alias="OPENAI_API_KEY")
    """The model provider's key."""
    basic_model: str = Field(default="gpt-4o-mini", alias="BASIC_MODEL")
    """The model every agent uses."""
    reasoning_model: str | None = Field(default=None, alias="REASONING_MODEL")
    """The model that plans when a request sets `enable_deep_thinking`. Unset: the basic model."""
    llm_request_timeout: float = Field(default=120.0, alias="LLM_REQUEST_TIMEOUT")
    """Seconds per model call."""
    # The model's context window in tokens; None: inferred from the model name
    # (activities.model.context_budget.token_limit_for). conf.yaml: BASIC_MODEL.token_limit.
    token_limit: int | None = Field(default=None, alias="TOKEN_LIMIT")
    """Context window the model calls are trimmed to. Unset: from the provider, else the model name."""
    # DeerFlow's model blocks (config/deerflow.py): TLS verification (false: a self-signed
    # endpoint) and the client's own retries of one call, before Temporal retries the activity.
    # The reasoning model has its own endpoint and key; unset, the basic model's.
    llm_verify_ssl: bool = Field(default=True, alias="LLM_VERIFY_SSL")
    """TLS verification of the model endpoint (`false`: a self-signed one), against the system's CA store, or
    `SSL_CERT_FILE` / `SSL_CERT_DIR` where set; a worker's other HTTPS requests trust the same, but the crawler's
    ignore those two."""
    llm_max_retries: int = Field(default=0, ge=0, le=10, alias="LLM_MAX_RETRIES")
    """The client's own retries of one call, before Temporal retries the activity."""
    reasoning_base_url: str | None = Field(default=None, alias="REASONING_BASE_URL")
    """The reasoning model's own endpoint. Unset: the basic model's."""
    reasoning_api_key: str | None = Field(default=None, alias="REASONING_API_KEY")
    """The reasoning model's own key. Unset: the basic model's."""
    reasoning_verify_ssl: bool | None = Field(default=None, alias="REASONING_VERIFY_SSL")
    """The reasoning model's TLS verification. Unset: the basic model's."""
    reasoning_max_retries: int | None = Field(default=None, ge=0, le=10, alias="REASONING_MAX_RETRIES")
    """The reasoning model's client retries. Unset: the basic model's."""

    # Output caps (issue #11): ``max_tokens`` sent with every model call, so a model that loops
    # stops at the cap instead of at LLM_REQUEST_TIMEOUT (and is not retried identically).
    # LLM_MAX_OUTPUT_TOKENS is every agent's cap; LLM_AGENT_MAX_OUTPUT_TOKENS overrides it per agent
    # ("reporter=8192,planner=4096"). Each is also held under the context window's output reserve.
    llm_max_output_tokens: int = Field(default=4096, ge=16, alias="LLM_MAX_OUTPUT_TOKENS")
    """Output cap (`max_tokens`) of every model call; held under a quarter of the context window."""
    llm_agent_max_output_tokens: dict[str, int] = Field(
        default_factory=lambda: {"reporter": 8192}, alias="LLM_AGENT_MAX_OUTPUT_TOKENS")
    """Per-agent output caps, as `agent=tokens` pairs."""
    # How the planner asks for JSON: "json_schema" sends the plan's schema (OpenAI, vLLM and
    # llama.cpp enforce it) and falls back to "json_object" when the provider refuses it.
    llm_structured_output: Literal["json_schema", "json_object"] = Field(
        default="json_schema", alias="LLM_STRUCTURED_OUTPUT")
    """The planner's structured output: `json_schema` (falls back to `json_object` on 400/422) or `json_object`."""
    # How agents use tools (issue #24): "native" tool calls, "json" schema-enforced action objects
    # (activities/model/json_tools.py), "auto" native until the provider proves not to call them.
    llm_tool_mode: Literal["native", "json", "auto"] = Field(default="auto", alias="LLM_TOOL_MODE")
    """How agents use tools: `native` tool calls, `json` (one schema-enforced action object per turn, for servers and
    models that cannot call tools), or `auto` (native until a probe finds the provider ignores tools or its model
    never reaches the call, then JSON for that endpoint and model for 10 minutes). See "Choosing a model".
    """

    @field_validator("llm_agent_max_output_tokens", mode="before")
    @classmethod
    def _split_agent_caps(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError("LLM_AGENT_MAX_OUTPUT_TOKENS is agent=tokens pairs, e.g. reporter=8192,planner=4096")
        return {name.strip(): int(tokens) for name, tokens in pairs}

    @field_validator("llm_agent_max_output_tokens")
    @classmethod
    def _positive_caps(cls, value: dict[str, int]) -> dict[str, int]:
        if any(tokens < 16 for tokens in value.values()):
            raise ValueError("each agent's output cap must be at least 16 tokens")
        return value

    def max_output_tokens(self, agent: str) -> int:
        """The output cap of ``agent`` (the prompt's name: planner, reporter, researcher, …)."""
        return self.llm_agent_max_output_tokens.get(agent, self.llm_max_output_tokens)

    # Agents.
    agent_recursion_limit: int = Field(default=DEFAULT_RECURSION_LIMIT, alias="AGENT_RECURSION_LIMIT")
    """Model turns per step before a final summarising turn (an invalid value: the default, as in DeerFlow)."""

    @field_validator("agent_recursion_limit", mode="before")
    @classmethod
    def _fallback_recursion_limit(cls, value: Any) -> int:
        # DeerFlow falls back to the default on an invalid value instead of refusing to start.
        try:
            limit = int(value)
        except (TypeError, ValueError):
            return DEFAULT_RECURSION_LIMIT
        return limit if limit > 0 else DEFAULT_RECURSION_LIMIT

    @field_validator("token_limit", mode="before")
    @classmethod
    def _ignore_invalid_token_limit(cls, value: Any) -> int | None:
        # Like the recursion limit: a bad value falls back to inference from the model name
        # instead of failing every model call of the worker.
        try:
            limit = int(value)
        except (TypeError, ValueError):
            return None
        return limit if limit > 0 else None

    def model_name(self, tier: str) -> str:
        if tier == "reasoning" and self.reasoning_model:
            return self.reasoning_model
        return self.basic_model

    def model_endpoint(self, tier: str) -> ModelEndpoint:
        """Where ``tier``'s calls go: the reasoning model's own block where it gives a value."""
        basic = ModelEndpoint(base_url=self.openai_base_url, api_key=self.openai_api_key,
                              verify_ssl=self.llm_verify_ssl, max_retries=self.llm_max_retries)
        if tier != "reasoning" or not self.reasoning_model:
            return basic
        return ModelEndpoint(
            base_url=self.reasoning_base_url or basic.base_url, api_key=self.reasoning_api_key or basic.api_key,
            verify_ssl=basic.verify_ssl if self.reasoning_verify_ssl is None else self.reasoning_verify_ssl,
            max_retries=basic.max_retries if self.reasoning_max_retries is None else self.reasoning_max_retries)

    def model_configured(self) -> bool:
        """Whether the operator named a model provider (env, .env or conf.yaml); else the offline demo.

        A key names one; so does an endpoint without a key (a local server), except OpenAI's own
        public one, which answers nothing without a key: a settings file that spells out that default
        alone must not send a keyless worker to the internet instead of the demo.
        """
        return bool(self.openai_api_key or
                    (self.openai_base_url and self.openai_base_url.rstrip("/") != OPENAI_PUBLIC_BASE_URL))


class ModelEndpoint(BaseModel):
    """One model tier's endpoint, key and client options."""

    base_url: str | None
    api_key: str | None
    verify_ssl: bool
    max_retries: int
