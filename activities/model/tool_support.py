"""Whether the model provider honours ``tools``: the coordinator cannot hand off to research without it.

Some servers drop ``tools`` unread: llama-server does when the model's chat template has no tool
support. The model then answers every question in text, and the run would end as a "direct reply"
that looks like a choice the model made. Others refuse the request with an error about tools.

A reply without a tool call cannot tell these apart from a genuine direct reply (small talk), so
when the coordinator answers without handing off, one cheap probe asks the same endpoint and model
for a call that ``tool_choice`` makes compulsory. A provider that honours tools makes the call, and
the direct reply stands; one that answers in text ignores tools, and the run fails saying so. The
answer is cached per worker, endpoint and model: a provider's tool support does not change between
calls, and the probe costs one short request once.
"""

from __future__ import annotations

import re
from typing import Any

import openai
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from temporalio import activity
from temporalio.exceptions import ApplicationError

PROBE_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "confirm_ready", "description": "Confirm that you are ready.",
    "parameters": {"type": "object", "properties": {}}}}
PROBE_MAX_TOKENS = 64

ADVICE = ("The research pipeline needs tool calling: use a model and server that support it (llama.cpp: "
          "llama-server --jinja with a chat template that has tool support; vLLM: --enable-auto-tool-choice "
          "and --tool-call-parser; Ollama: a model tagged 'tools'). See README, \"Choosing a model\".")
IGNORED = ("The model provider ignores tools: the coordinator was offered handoff_to_planner and answered in "
           "text, and a probe whose tool_choice required a tool call was answered in text too, so no question "
           "can be handed to research. " + ADVICE)

# How providers word a refusal of ``tools``: llama-server without --jinja, vLLM without auto tool
# choice, Ollama for a model without tool support, and generic gateways.
_REFUSAL = re.compile(r"tools? param requires --jinja|enable-auto-tool-choice|does not support tools"
                      r"|tools? (?:use |calling |calls )?(?:is |are )?not supported|unsupported.{0,20}\btools?\b",
                      re.IGNORECASE)


def refuses_tools(message: str) -> bool:
    """Whether a provider's error message says that it does not take ``tools``."""
    return bool(_REFUSAL.search(message))


def tools_refused(provider_message: str) -> ApplicationError:
    """The final failure for a provider that refused ``tools`` with an error."""
    return ApplicationError(f"The model provider does not accept tools ({provider_message}). {ADVICE}",
                            type="ModelToolsUnsupported", non_retryable=True)


class ToolSupport:
    """The worker's answers, by (endpoint, model): True honours tools, False ignores them."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], bool] = {}

    async def check(self, client: ChatOpenAI) -> bool | None:
        """Whether ``client``'s provider honours tools; None when the probe could not tell (it failed).

        ``client`` is capped at ``PROBE_MAX_TOKENS``: the probe's answer is one short call or sentence.
        """
        key = (str(client.openai_api_base), client.model_name)
        if key in self._known:
            return self._known[key]
        probe = client.bind_tools([PROBE_TOOL], tool_choice="required")
        try:
            reply = await probe.ainvoke([SystemMessage(content="You check that function calling works."),
                                         HumanMessage(content="Call the function confirm_ready now.")])
        except openai.APIStatusError as error:
            if not refuses_tools(str(error.message)):
                activity.logger.warning("The tool-support probe failed (%s); keeping the direct reply", error)
                return None
            supported = False
        except Exception as error:  # a probe that fails says nothing about tools; the reply stands
            activity.logger.warning("The tool-support probe failed (%s); keeping the direct reply", error)
            return None
        else:
            supported = bool(reply.tool_calls or reply.invalid_tool_calls)  # type: ignore[attr-defined]
        activity.logger.info("Tool support of %s at %s: %s", key[1], key[0], supported)
        self._known[key] = supported
        return supported
