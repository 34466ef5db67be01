"""Whether the model provider's model calls tools: the research pipeline hands off through them.

Some servers drop ``tools`` unread: llama-server does when the model's chat template has no tool
support. The model then answers every question in text, and the run would end as a "direct reply"
that looks like a choice the model made. Others enforce a call with a grammar that allows free
text first, and a small model rambles until its output cap without reaching the call. Others
refuse the request with an error about tools.

A reply without a tool call cannot tell these apart from a genuine direct reply (small talk), so
when such a reply comes back, one cheap probe asks the same endpoint and model for a call that
``tool_choice`` makes compulsory, and its ``finish_reason`` says which case it is: a call (tools
work, the reply stands), ``stop`` with text (tools are ignored), ``length`` (enforced, but the
model does not call). For a negative answer llama-server's ``/props`` names the chat template and
its capabilities, so the advice fits the set-up (issue #24); a template without tool support means
"ignored" whatever the text's ending (a small model rambles to the cap with tools dropped too).

The answer is kept per worker, endpoint and model for ``PROBE_TTL_SECONDS`` only, and a negative
answer that failed a run is forgotten at once: an operator who fixes the server (a template with
tool support) gets a fresh probe on the next run instead of the worker's old verdict.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx
import openai
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai.chat_models.base import ChatOpenAI  # not the package: runtime/deferred_init.py
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.model import reply_calls
from activities.model.kept_verdicts import KeptVerdicts, digest
from activities.support.tls import verifying_context
from workflows.contracts.usage import Usage

PROBE_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "confirm_ready", "description": "Confirm that you are ready.",
    "parameters": {"type": "object", "properties": {}}}}
PROBE_MAX_TOKENS = 64
PROBE_TTL_SECONDS = 600.0
PROPS_TIMEOUT_SECONDS = 5.0

SERVE_TOOLS = ("use a model and server that support tool calling (llama.cpp: llama-server --jinja with a chat "
               "template that has tool support; vLLM: --enable-auto-tool-choice and --tool-call-parser; Ollama: "
               "a model tagged 'tools')")
USE_JSON = ("set LLM_TOOL_MODE=auto (the default) or json, so that the agents act through schema-enforced JSON "
            "replies, which llama.cpp, vLLM and Ollama enforce without tool support")
ADVICE = f"The research pipeline needs tools: {USE_JSON}, or {SERVE_TOOLS}. See docs/models.md."

# How providers word a refusal of ``tools``: llama-server without --jinja, vLLM without auto tool
# choice, Ollama for a model without tool support, and generic gateways.
_REFUSAL = re.compile(r"tools? param requires --jinja|enable-auto-tool-choice|does not support tools"
                      r"|tools? (?:use |calling |calls )?(?:is |are )?not supported|unsupported.{0,20}\btools?\b",
                      re.IGNORECASE)
# Chat template families, by a marker of their text (``/props``' ``chat_template``), first match wins.
_FAMILIES = (("<|start_header_id|>", "Llama 3"), ("<start_of_turn>", "Gemma"), ("<|im_start|>", "ChatML"),
             ("[INST]", "Mistral [INST]"), ("<|user|>", "Zephyr/Phi"))


def refuses_tools(message: str) -> bool:
    """Whether a provider's error message says that it does not take ``tools``."""
    return bool(_REFUSAL.search(message))


def tools_refused(provider_message: str) -> ApplicationError:
    """The final failure for a provider that refused ``tools`` with an error."""
    return ApplicationError(f"The model provider does not accept tools ({provider_message}). {ADVICE}",
                            type="ModelToolsUnsupported", non_retryable=True)


class Verdict(StrEnum):
    CALLS = "calls"  # the forced call was made: tools work
    IGNORED = "ignored"  # answered in text and stopped: the server dropped ``tools``
    RAMBLES = "rambles"  # ran to the cap in text: the call is enforced, the model never reaches it
    REFUSED = "refused"  # the server refused ``tools`` with an error


@dataclass(frozen=True)
class ProbeAnswer:
    """What the probe found (None: the probe failed and says nothing), what it cost, and the
    server's chat template as ``/props`` describes it (None: no ``/props``)."""

    verdict: Verdict | None
    usage: Usage
    template: str | None = None

    @property
    def calls_tools(self) -> bool | None:
        return None if self.verdict is None else self.verdict is Verdict.CALLS

    def failure(self, agent: str, tool: str) -> str:
        """The run's failure message for ``LLM_TOOL_MODE=native``: what was seen, and what would help."""
        template = f"; llama-server's /props reports {self.template}" if self.template else ""
        if self.verdict is Verdict.RAMBLES:
            return (f"The model provider enforces tool calls but the model does not make them: the {agent} was "
                    f"offered {tool} and answered in text, and a probe whose tool_choice required a call ran "
                    f"to its {PROBE_MAX_TOKENS}-token cap in text without calling (finish_reason length)"
                    f"{template}. The server's grammar allows text before the call and this model never reaches "
                    f"it: {USE_JSON}, or use a larger model. See docs/models.md.")
        return (f"The model provider ignores tools: the {agent} was offered {tool} and answered in text, and a "
                "probe whose tool_choice required a call was answered in text too (finish_reason stop)"
                f"{template}, so no question can be handed to research. {ADVICE}")


def template_description(props: dict[str, Any]) -> str | None:
    """llama-server's ``/props`` in a few words: the template's family, the model file, the caps
    (None: no template in ``props``)."""
    text = props.get("chat_template")
    caps = props.get("chat_template_caps")
    if not isinstance(text, str) and not isinstance(caps, dict):
        return None
    family = next((name for marker, name in _FAMILIES if isinstance(text, str) and marker in text), "unrecognised")
    if isinstance(text, str) and "<tool_call>" in text:
        family += " with <tool_call> tool calls (Hermes/Qwen style)"
    model = str(props.get("model_path") or "").replace("\\", "/").rsplit("/", 1)[-1]
    description = f"the chat template ({family})" + (f" of {model}" if model else "")
    if isinstance(caps, dict) and "supports_tools" in caps:
        description += f" with chat_template_caps.supports_tools={str(bool(caps['supports_tools'])).lower()}"
    if props.get("chat_template_tool_use"):
        description += " and a separate tool_use template"
    return description


async def read_props(base_url: str, verify: bool) -> dict[str, Any]:
    """llama-server's ``/props`` beside ``base_url``; empty for a server without it (OpenAI, vLLM,
    Ollama) or one that does not answer in time."""
    root = re.sub(r"/v1/?$", "", base_url.rstrip("/"))
    try:
        async with httpx.AsyncClient(timeout=PROPS_TIMEOUT_SECONDS,
                                     verify=verifying_context() if verify else False) as client:
            response = await client.get(f"{root}/props")
        props = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return {}
    return props if isinstance(props, dict) else {}


def template_ignores_tools(props: dict[str, Any]) -> bool:
    """Whether ``/props`` says the chat template has no tool support: then the server drops ``tools``,
    however the model's text ended (SmolLM2-135M's own template: it rambles to the probe's cap)."""
    caps = props.get("chat_template_caps")
    return isinstance(caps, dict) and caps.get("supports_tools") is False


def usage_of(reply: AIMessage) -> Usage:
    """One model call's usage, as the provider reported it."""
    meta: dict[str, Any] = dict(reply.usage_metadata or {})
    return Usage(llm_calls=1, input_tokens=int(meta.get("input_tokens", 0)),
                 output_tokens=int(meta.get("output_tokens", 0)), total_tokens=int(meta.get("total_tokens", 0)))


def verdict_of(reply: AIMessage) -> Verdict:
    """A forced call made (with or without text before it), else what stopped the text."""
    if reply_calls.raw_calls(reply):
        return Verdict.CALLS
    finish = (reply.response_metadata or {}).get("finish_reason")
    return Verdict.RAMBLES if finish == "length" else Verdict.IGNORED


class ToolSupport:
    """The worker's recent answers, by (endpoint, model), each kept for ``ttl`` seconds; with
    ``kept``, the positive ones also in the worker's home, for the next worker started on it."""

    def __init__(self, ttl: float = PROBE_TTL_SECONDS, clock: Callable[[], float] = time.monotonic,
                 kept: KeptVerdicts | None = None) -> None:
        self.ttl = ttl
        self.clock = clock
        self.kept = kept
        self._known: dict[tuple[str, str], tuple[float, ProbeAnswer]] = {}
        # What an earlier worker on this home found working, by digest, as times of this clock (read once).
        now = clock()
        self._inherited = {} if kept is None else {name: now - age for name, age in kept.ages().items()}
        # One probe at a time per key: a fresh worker takes several calls at once, and each asking
        # its own probe sends the provider requests no rate limit counted (the model queue's counts
        # activities, and a probe rides inside one).
        self._probing: dict[tuple[str, str], asyncio.Lock] = {}

    @staticmethod
    def key_of(base_url: str, model: str) -> tuple[str, str]:
        return base_url, model

    @classmethod
    def key(cls, client: ChatOpenAI) -> tuple[str, str]:
        return cls.key_of(str(client.openai_api_base), client.model_name)

    def known(self, key: tuple[str, str]) -> Verdict | None:
        """The unexpired verdict for ``key``, if the worker has one (or an earlier one on its home)."""
        if self._inherited:  # empty once used, or with no kept verdicts: no digest on every turn
            seen = self._inherited.pop(digest(*key), None)
            if seen is not None and key not in self._known:
                self._known[key] = (seen, ProbeAnswer(Verdict.CALLS, Usage()))
        entry = self._known.get(key)
        if entry is None or self.clock() - entry[0] > self.ttl:
            self._known.pop(key, None)
            return None
        return entry[1].verdict

    def remember(self, key: tuple[str, str], answer: ProbeAnswer) -> None:
        """Keep ``answer`` for ``key`` for ``ttl`` seconds (it outranks an inherited one: see ``known``)."""
        self._known[key] = (self.clock(), answer)
        if self.kept is not None and answer.verdict is not None:
            self.kept.record(digest(*key), answer.verdict is Verdict.CALLS)

    def forget(self, key: tuple[str, str]) -> None:
        """Drop ``key``'s verdict: the next call that needs it probes again."""
        self._known.pop(key, None)
        if self.kept is not None:
            name = digest(*key)
            self._inherited.pop(name, None)  # else the next ``known`` would take it up again
            self.kept.record(name, False)

    async def check(self, client: ChatOpenAI, verify: bool = True) -> ProbeAnswer:
        """Whether ``client``'s provider and model call tools (a cached verdict costs nothing).

        ``client`` is capped at ``PROBE_MAX_TOKENS``: the probe's answer is one short call or sentence.
        """
        key = self.key(client)
        async with self._probing.setdefault(key, asyncio.Lock()):
            return await self._check(client, key, verify)

    async def _check(self, client: ChatOpenAI, key: tuple[str, str], verify: bool) -> ProbeAnswer:
        """:meth:`check` for ``key``, with no other probe of it in flight."""
        verdict, entry = self.known(key), self._known.get(key)
        if verdict is not None and entry is not None:
            return ProbeAnswer(verdict, Usage(), entry[1].template)
        probe = client.bind_tools([PROBE_TOOL], tool_choice="required")
        usage = Usage()
        try:
            reply = await probe.ainvoke([SystemMessage(content="You check that function calling works."),
                                         HumanMessage(content="Call the function confirm_ready now.")])
        except openai.APIStatusError as error:
            if not refuses_tools(str(error.message)):
                activity.logger.warning("The tool-support probe failed (%s); keeping the reply", error)
                return ProbeAnswer(None, usage)
            verdict = Verdict.REFUSED
        except Exception as error:  # a probe that fails says nothing about tools; the reply stands
            activity.logger.warning("The tool-support probe failed (%s); keeping the reply", error)
            return ProbeAnswer(None, usage)
        else:
            usage, verdict = usage_of(reply), verdict_of(reply)  # type: ignore[arg-type]
        props = {} if verdict is Verdict.CALLS else await read_props(key[0], verify)
        if verdict is Verdict.RAMBLES and template_ignores_tools(props):
            verdict = Verdict.IGNORED
        template = template_description(props)
        answer = ProbeAnswer(verdict, usage, template)
        activity.logger.info("Tool support of %s at %s: %s%s", key[1], key[0], verdict.value,
                             f" ({template})" if template else "")
        self.remember(key, answer)
        return answer
