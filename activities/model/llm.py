"""The ``chat`` activity: one model turn through ``langchain_openai.ChatOpenAI``.

ChatOpenAI speaks to any OpenAI-compatible endpoint. The client's own retries are switched off:
Temporal retries the activity instead, durably, and this module decides which provider errors
are worth retrying (408/409/429/5xx and network failures) and which are final (other 4xx),
honouring the provider's Retry-After.

Every call sends an output cap (``max_tokens``, per agent from settings): a model that loops
stops there, and its reply comes back marked ``truncated`` for the workflow to handle, instead of
running into the request timeout and being retried with the identical request.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import httpx
import openai
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages import ToolMessage as LcToolMessage
from langchain_openai.chat_models.base import ChatOpenAI  # not the package: runtime/deferred_init.py
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.guards.secret_scrubber import SecretScrubber
from activities.model import json_tools, reply_calls, token_stream
from activities.model.call_costs import priced, quota_tokens_of, reply_usage
from activities.model.clients import KeptClients
from activities.model.context_budget import (
    count_request_tokens,
    count_tool_tokens,
    fit_to_budget,
    output_reserve,
    script_weights_for,
)
from activities.model.context_window import ContextWindows, Overflow, context_exceeded, overflow_of, retrim_limit
from activities.model.kept_verdicts import KeptVerdicts
from activities.model.output_caps import output_cap, output_caps
from activities.model.plan_schema import mended_plan, planner_schema
from activities.model.prompts import render_prompt
from activities.model.reply_safety import safe_reply
from activities.model.telemetry import failure_usage, model_call_telemetry
from activities.model.tool_support import (
    PROBE_MAX_TOKENS,
    PROBE_TTL_SECONDS,
    ProbeAnswer,
    ToolSupport,
    Verdict,
    refuses_tools,
    tools_refused,
)
from activities.support.limits import provider_slot, spend_tokens
from config.settings import Settings
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse, ModelTier
from workflows.contracts.usage import Usage
from workflows.research.tools import HANDOFF_TO_PLANNER

RETRYABLE_STATUS = {408, 409, 429}
# How often a turn is asked while its completions come back empty: a glitch passes on the next ask;
# a model that keeps ending at once (SmolLM2-135M, asked natively about a conversation of tool calls
# its template cannot render) does not, and the turn then fails with every ask counted.
EMPTY_COMPLETION_ASKS = 3


SCHEMAS = {"plan": planner_schema}
# Statuses with which providers refuse a ``response_format`` they do not support.
FORMAT_REFUSED = {400, 422}


def _response_formats(settings: Settings, request: ChatRequest, cap: int, action_object: bool = False,
                      ) -> list[dict[str, Any] | None]:
    """The ``response_format`` values to try, best first: the schema (its bounds from the turn's
    output ``cap``), then plain JSON mode. ``action_object`` asks for JSON tool mode's instead."""
    if not request.json_mode and not action_object:
        return [None]
    plain = {"type": "json_object"}
    if settings.llm_structured_output != "json_schema":
        return [plain]
    if action_object:
        return [json_tools.response_format(request.tools, request.messages, cap, request.url_choices), plain]
    if request.response_schema is None:
        return [plain]
    schema = {"name": request.response_schema, "schema": SCHEMAS[request.response_schema](request, cap),
              "strict": False}
    return [{"type": "json_schema", "json_schema": schema}, plain]


def _to_langchain(system_prompt: str, messages: list[ChatMessage]) -> list[BaseMessage]:
    converted: list[BaseMessage] = [SystemMessage(content=system_prompt)]
    for message in messages:
        if message.role == "system":
            converted.append(SystemMessage(content=message.content))
        elif message.role == "user":
            converted.append(HumanMessage(content=message.content, name=message.name))
        elif message.role == "tool":
            converted.append(LcToolMessage(content=message.content, tool_call_id=message.tool_call_id or ""))
        else:
            converted.append(
                AIMessage(
                    content=message.content,
                    tool_calls=[
                        {"id": call.id, "name": call.name, "args": call.arguments, "type": "tool_call"}
                        for call in message.tool_calls
                    ],
                )
            )
    return converted


def _within_budget(settings: Settings, request: ChatRequest, system_prompt: str,
                   tools: list[dict[str, Any]], limit: int) -> list[ChatMessage]:
    """The request's messages trimmed to the model's context window (see ``context_budget``).

    Trimming happens here, not in the workflow, so history keeps every tool output in full and
    a change of model or ``TOKEN_LIMIT`` applies to the next turn of a running workflow.
    """
    model = settings.model_name(request.model_tier.value)
    reserve = output_reserve(limit)
    weights = script_weights_for(model)
    tools_tokens = count_tool_tokens(tools, weights)
    messages = fit_to_budget(system_prompt, request.messages, tools_tokens, limit, reserve, weights)
    if messages != request.messages:
        activity.logger.info(
            "Trimmed the %s prompt from ~%d to ~%d estimated tokens (%d of %d messages kept) to fit "
            "%s's %d-token window with %d tokens reserved for the reply",
            request.prompt, count_request_tokens(system_prompt, request.messages, tools_tokens, weights),
            count_request_tokens(system_prompt, messages, tools_tokens, weights), len(messages), len(request.messages),
            model, limit, reserve,
        )
    return messages


def _retry_after(error: openai.APIStatusError) -> timedelta | None:
    value = error.response.headers.get("retry-after")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return timedelta(seconds=min(seconds, 300)) if seconds and seconds > 0 else None


# A failure message's length: the server keeps an activity's last failure only while the whole
# failure (message and stack trace) is within its size limit, and a provider may echo a whole
# prompt. Every real provider message seen so far is far shorter.
MAX_FAILURE_MESSAGE_CHARS = 2_000


def _bounded(text: str) -> str:
    """``text`` as it is, or its head and tail around a mark when it is over the failure's budget."""
    if len(text) <= MAX_FAILURE_MESSAGE_CHARS:
        return text
    head = MAX_FAILURE_MESSAGE_CHARS * 3 // 4
    return f"{text[:head]} […] {text[head - MAX_FAILURE_MESSAGE_CHARS:]}"


def _provider_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return _bounded(str(inner["message"]))
    return _bounded(error.message)


def classify_provider_error(error: Exception) -> ApplicationError:
    """Sort a provider failure into a retryable or a final ``ApplicationError``."""
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        message = f"Model provider returned HTTP {status}: {_provider_message(error)}"
        if refuses_tools(message):  # retrying cannot help; say what would
            return tools_refused(message)
        if status in RETRYABLE_STATUS or status >= 500:
            return ApplicationError(
                message, type="ModelProviderUnavailable", next_retry_delay=_retry_after(error)
            )
        return ApplicationError(message, type="ModelProviderError", non_retryable=True)
    if isinstance(error, openai.APITimeoutError | httpx.TimeoutException):
        return ApplicationError(f"Model provider timed out: {_bounded(str(error))}", type="ModelProviderUnavailable")
    if isinstance(error, openai.APIConnectionError | httpx.TransportError):
        return ApplicationError(f"Model provider unreachable: {_bounded(str(error))}", type="ModelProviderUnavailable")
    if isinstance(error, json.JSONDecodeError | openai.APIResponseValidationError):
        return ApplicationError(f"Model provider sent a malformed response: {_bounded(str(error))}",
                                type="ModelBadResponse")
    return ApplicationError(f"Model call failed: {type(error).__name__}: {_bounded(str(error))}",
                            type="ModelCallFailed")


def _cut_chain(error: Exception) -> ApplicationError:
    """The provider failure as one ``ApplicationError`` without its cause chain (raise it ``from None``).

    langchain's, openai's and httpx's chained exceptions carry tracebacks that, serialised as the
    failure's causes, exceed the server's failure size limit: the server then keeps only "Failure
    exceeds size limit." and the provider's message is lost from ``describe`` and the Web UI. The
    message says what happened; the chain goes to the worker's log.
    """
    activity.logger.warning("Model call failed", exc_info=error)
    return _failed_call(classify_provider_error(error))


def _with_usage(error: ApplicationError, spent: Usage) -> ApplicationError:
    """``error`` carrying ``spent`` in its details, added to what it carried (its own failed call), so
    the run counts every call made before it failed and the one that failed."""
    total = spent.model_copy()
    total.add(failure_usage(error))
    return ApplicationError(error.message, total, type=error.type, non_retryable=error.non_retryable,
                            next_retry_delay=error.next_retry_delay)


def _failed_call(error: ApplicationError) -> ApplicationError:
    """``error``, a provider's answer to one call (or its failure to answer), counting that call."""
    return _with_usage(error, Usage(llm_calls=1))


class _Overflowed(Exception):
    """The provider refused the request as longer than its context window."""

    def __init__(self, overflow: Overflow) -> None:
        super().__init__(overflow.message)
        self.overflow = overflow


class ModelActivities:
    """The model turn, built with the worker's settings (endpoint, key, model names, limits)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.tool_support = ToolSupport(kept=KeptVerdicts(settings.home, PROBE_TTL_SECONDS))
        self.windows = ContextWindows()
        self.clients = KeptClients(settings)
        self.scrubber = SecretScrubber.for_settings(settings)  # the token previews' (activities/model/token_stream.py)

    async def warm(self) -> None:
        """At worker start, what a run's first turn of each tier would otherwise pay on its critical
        path: the provider's context window (``ContextWindows.ask_ahead``) and the clients its agents'
        output caps and the tool-support probe ask with (3 ms of CPU each)."""
        for tier in ModelTier:
            window = await self.windows.ask_ahead(self.settings, tier.value)
            for cap in {PROBE_MAX_TOKENS, *output_caps(self.settings, window)}:
                self.clients.get(tier.value, cap)

    @activity.defn(name="chat")
    @model_call_telemetry
    async def chat(self, request: ChatRequest) -> ChatResponse:
        """One model turn, in the tool mode of ``LLM_TOOL_MODE`` (see ``activities/model/json_tools.py``).

        ``auto`` asks natively until the provider proves not to call tools: it refuses them with an
        error, or a reply without a call from a turn that offered tools is checked with a probe
        (``tool_support``) that finds the provider ignores tools or its model never reaches the
        call (unless a call the model made lately already showed it does). The same turn is then
        asked again in JSON mode, as is every later turn while the worker's verdict lasts; so is a
        tool-less turn of a conversation that called tools (an agent's last turn), whose calls a
        template without tool support cannot render. Every call made here,
        the probe and a discarded native reply included, counts in the returned usage; a failure
        carries the usage spent so far, the failed call's included, in its details
        (``workflows/calls/model_calls.py`` adds it).
        """
        mode = self.settings.llm_tool_mode
        probe = self.clients.get(request.model_tier.value, PROBE_MAX_TOKENS)
        key = ToolSupport.key(probe)
        in_json = mode == "json" or (mode == "auto" and self.tool_support.known(key) not in (None, Verdict.CALLS))
        if not request.tools:
            called = any(message.tool_calls for message in request.messages)
            return await self._turn(request, json_mode=in_json and called)
        if in_json:
            return await self._turn(request, json_mode=True)
        try:
            response = await self._turn(request, json_mode=False)
        except ApplicationError as error:
            if mode != "auto" or error.type != "ModelToolsUnsupported":
                raise
            activity.logger.warning("The provider refuses tools (%s): asking the %s in JSON tool mode",
                                    error.message, request.prompt)
            self.tool_support.remember(key, ProbeAnswer(Verdict.REFUSED, Usage()))
            return await self._again_in_json(request, failure_usage(error))
        if response.message.tool_calls:
            # A call made is what the probe would find: a later reply in text (an agent's last turn)
            # is then taken as it is, without the probe's round trip in a new worker's first run.
            self.tool_support.remember(key, ProbeAnswer(Verdict.CALLS, Usage()))
            return response
        handoff = any(spec.name == HANDOFF_TO_PLANNER.name for spec in request.tools)
        if not (mode == "auto" or handoff):
            return response
        spent = response.usage.model_copy()
        answer = await self._probe(request, probe, spent)
        if answer.calls_tools is not False:
            return response.model_copy(update={"usage": spent})
        if mode == "native":
            self.tool_support.forget(key)  # a fixed server is probed afresh by the next run
            offered = HANDOFF_TO_PLANNER.name if handoff else ", ".join(spec.name for spec in request.tools)
            raise ApplicationError(answer.failure(request.prompt, offered), spent,
                                   type="ModelToolsUnsupported", non_retryable=True)
        activity.logger.warning("The provider does not call tools (%s): asking the %s again in JSON tool mode",
                                answer.verdict, request.prompt)
        return await self._again_in_json(request, spent)

    async def _again_in_json(self, request: ChatRequest, spent: Usage) -> ChatResponse:
        """The turn asked in JSON mode after the native ask that cost ``spent``, which counts in its usage."""
        try:
            again = await self._turn(request, json_mode=True)
        except ApplicationError as error:
            raise _with_usage(error, spent) from None
        total = spent.model_copy()
        total.add(again.usage)
        return again.model_copy(update={"usage": total})

    async def _probe(self, request: ChatRequest, probe: ChatOpenAI, spent: Usage) -> ProbeAnswer:
        """The provider's tool support (``activities/model/tool_support.py``) asked through ``probe``
        (a client capped at ``PROBE_MAX_TOKENS``), its cost added to ``spent``."""
        endpoint = self.settings.model_endpoint(request.model_tier.value)
        await spend_tokens(self.settings.llm_tokens_per_minute, PROBE_MAX_TOKENS)  # its prompt is a few words
        async with provider_slot("llm", self.settings.llm_max_concurrency):
            answer = await self.tool_support.check(probe, verify=endpoint.verify_ssl)
        spent.add(priced(self.settings, probe.model_name, answer.usage))
        return answer

    async def _turn(self, request: ChatRequest, json_mode: bool) -> ChatResponse:
        """One completion: natively, or (``json_mode``) with the tools as a schema-enforced action object.

        An empty completion (no text, no call, not cut at the cap) is asked again, up to
        ``EMPTY_COMPLETION_ASKS`` times in all, here rather than by the activity's retries, so that every
        ask counts in the usage returned or, when all came back empty, in the final failure's details.
        """
        spent = Usage()
        for _ in range(EMPTY_COMPLETION_ASKS):
            try:
                response = await self._ask(request, json_mode)
            except ApplicationError as error:
                raise _with_usage(error, spent) from None
            spent.add(response.usage)
            message = response.message
            if message.content.strip() or message.tool_calls or response.truncated:
                return response.model_copy(update={"usage": spent})
            activity.logger.warning("The %s reply was an empty completion", request.prompt)
        raise ApplicationError(f"Model provider returned an empty completion {EMPTY_COMPLETION_ASKS} times", spent,
                               type="ModelEmptyCompletion", non_retryable=True)

    async def _ask(self, request: ChatRequest, json_mode: bool) -> ChatResponse:
        """One completion of ``_turn``, however it came back."""
        settings = self.settings
        model = settings.model_name(request.model_tier.value)
        system_prompt = render_prompt(request.prompt, request.prompt_vars)
        if json_mode:
            system_prompt += json_tools.instructions(request.tools, answers=json_tools.may_answer(request.messages))
            tools: list[dict[str, Any]] = []
        else:
            tools = [{"type": "function", "function": spec.model_dump()} for spec in request.tools]
        limit = await self.windows.window(settings, model, request.model_tier.value)
        for retrimmed in (False, True):
            messages = _within_budget(settings, request, system_prompt, tools, limit)
            cap = output_cap(settings, request, limit)
            try:
                formats = _response_formats(settings, request, cap, json_mode)
                sent = json_tools.as_plain(messages) if json_mode else messages
                reply = await self._complete(request, system_prompt, sent, tools, cap, formats)
                break
            except _Overflowed as overflowed:
                overflow = overflowed.overflow
                weights = script_weights_for(model)
                estimated = count_request_tokens(system_prompt, messages, count_tool_tokens(tools, weights), weights)
                smaller = retrim_limit(overflow, estimated)
                if retrimmed or smaller is None:
                    raise _with_usage(context_exceeded(overflow, limit, retrimmed),
                                      Usage(llm_calls=1 + retrimmed)) from None
                if overflow.window is not None:
                    self.windows.learn(settings, model, overflow.window, request.model_tier.value)
                # Trimming to a window no smaller than the refused one could not help: shrink anyway.
                limit = smaller if smaller < limit else limit * 3 // 4
                activity.logger.warning("The provider refused the %s request as over its context window (%s); "
                                        "trimming to %d tokens for one more try", request.prompt, overflow.message,
                                        limit)
        content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
        calls = reply_calls.tool_calls(reply)
        if json_mode:  # json-repair is pure Python: a long reply would hold the event loop
            content, calls = await asyncio.to_thread(json_tools.parse_action, content, request.messages)
        elif request.response_schema == "plan":
            content = await asyncio.to_thread(mended_plan, content)
        content, calls = safe_reply(content, calls)
        finish_reason = (reply.response_metadata or {}).get("finish_reason")
        truncated = finish_reason == "length"
        if truncated:
            activity.logger.warning("The %s reply stopped at its output cap of %d tokens", request.prompt, cap)
        usage = reply_usage(settings, model, reply)
        usage.json_tool_calls = int(json_mode)
        return ChatResponse(
            message=ChatMessage(role="assistant", content=content, tool_calls=calls), usage=usage,
            finish_reason=finish_reason, truncated=truncated, output_cap=cap,
        )

    async def _complete(self, request: ChatRequest, system_prompt: str, messages: list[ChatMessage],
                        tools: list[dict[str, Any]], cap: int, formats: list[dict[str, Any] | None]) -> AIMessage:
        """One completion, with the response ``formats`` tried best first; every provider failure
        is sorted (``classify_provider_error``), a context overflow raised for the caller."""
        settings = self.settings
        client: Any = self.clients.get(request.model_tier.value, cap)
        if tools:
            client = client.bind_tools(tools)
        quota_tokens = quota_tokens_of(settings, request, system_prompt, messages, tools, cap)
        for index, response_format in enumerate(formats):
            # In the body, not as ``response_format=``: with that, langchain takes the SDK's parse path,
            # which raises on finish_reason "length" and would lose a reply cut at its cap.
            runnable = client.bind(extra_body={"response_format": response_format}) if response_format else client
            try:
                await spend_tokens(settings.llm_tokens_per_minute, quota_tokens)
                async with provider_slot("llm", settings.llm_max_concurrency):
                    return await token_stream.invoke(runnable, _to_langchain(system_prompt, messages),
                                                      request.prompt, settings, self.scrubber)
            except openai.APIStatusError as error:
                overflow = overflow_of(error)
                if overflow is not None:  # a 400 too, but not about the format
                    raise _Overflowed(overflow) from None
                if error.status_code in FORMAT_REFUSED and index + 1 < len(formats):
                    activity.logger.warning("The provider refused response_format %s (%s); trying %s",
                                            response_format and response_format["type"], _provider_message(error),
                                            formats[index + 1])
                    continue
                raise _cut_chain(error) from None
            except Exception as error:  # every provider failure is sorted, none escapes unclassified
                raise _cut_chain(error) from None
        raise AssertionError("unreachable: the last format's failure is raised")
