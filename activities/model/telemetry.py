"""A span and metrics for each model call: the ``chat`` activity wears ``@model_call_telemetry``.

Why a decorator: the model turn stays one function about the model, and what an operator sees
(a ``chat <model>`` span under the activity's ``RunActivity:chat`` span, and the call, token and
cost counters) is decided here. It reads only what is safe to show: the operator's model name,
the agent (a prompt template's name), the attempt, token counts, the finish reason and, on
failure, the error's type. Prompt text, replies, provider messages and keys never become span
attributes or metric labels.

With tracing off the span is OpenTelemetry's no-op one, and with no metrics endpoint the SDK's
meter is a no-op: the decorator then costs a few attribute lookups per call.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from temporalio import activity
from temporalio.exceptions import ApplicationError

from config.settings import Settings
from workflows.contracts.chat import ChatRequest, ChatResponse
from workflows.contracts.usage import MICRO, Usage


class _HasSettings(Protocol):
    settings: Settings


S = TypeVar("S", bound=_HasSettings)
Chat = Callable[[S, ChatRequest], Awaitable[ChatResponse]]


def model_call_telemetry(fn: Chat[S]) -> Chat[S]:
    """Trace and count each call of ``fn``, a model-turn method of an object holding ``settings``."""

    @functools.wraps(fn)
    async def wrapper(self: S, request: ChatRequest) -> ChatResponse:
        model = self.settings.model_name(request.model_tier.value)
        labels = {"model": model, "agent": request.prompt}
        tracer = trace.get_tracer(__name__)
        with tracer.start_as_current_span(f"chat {model}", record_exception=False,
                                          set_status_on_exception=False) as span:
            span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                                 "deerflow.agent": request.prompt,
                                 "temporal.activity.attempt": activity.info().attempt})
            try:
                response = await fn(self, request)
            except Exception as error:
                kind = error.type if isinstance(error, ApplicationError) and error.type else type(error).__name__
                span.set_status(Status(StatusCode.ERROR, kind))
                span.set_attribute("error.type", kind)
                spent = failure_usage(error)
                _count_call(labels, "error", spent.llm_calls or 1)
                _count_usage(labels, spent)
                raise
            usage = response.usage
            span.set_attributes({"gen_ai.usage.input_tokens": usage.input_tokens,
                                 "gen_ai.usage.output_tokens": usage.output_tokens,
                                 "gen_ai.response.finish_reasons": [response.finish_reason or "unknown"]})
            _count_call(labels, "truncated" if response.truncated else "ok", usage.llm_calls)
            _count_usage(labels, usage)
            return response

    return wrapper


def failure_usage(error: BaseException) -> Usage:
    """What a failed turn spent, the failed call included, as its details report it (``llm.py``)."""
    details = error.details if isinstance(error, ApplicationError) else ()
    return details[0] if details and isinstance(details[0], Usage) else Usage()


def _count_call(labels: dict[str, Any], outcome: str, calls: int) -> None:
    """Count ``calls`` model calls: a turn's own and those it made to decide how to ask (the tool-support
    probe, a native reply asked again in JSON mode), as the run's usage counts them."""
    meter = activity.metric_meter()
    meter.create_counter("deerflow_llm_calls", "Model calls (the probe's included), by model, agent and outcome").add(
        calls, {**labels, "outcome": outcome})


def _count_usage(labels: dict[str, Any], usage: Usage) -> None:
    """The call's tokens, and its cost as the call priced it (workflows/contracts/usage.py): the run's figure."""
    meter = activity.metric_meter()
    tokens = meter.create_counter("deerflow_llm_tokens", "Tokens the provider reported, by model, agent and kind")
    tokens.add(usage.input_tokens, {**labels, "kind": "prompt"})
    tokens.add(usage.output_tokens, {**labels, "kind": "completion"})
    mine = usage.by_model.get(labels["model"])
    priced = mine is not None and mine.price is not None
    meter.create_counter("deerflow_llm_cost_microusd", "Estimated cost in millionths of a USD, by model", "uUSD").add(
        round(usage.cost_usd * MICRO), {"model": labels["model"], "priced": str(priced).lower()})
