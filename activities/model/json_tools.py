"""JSON tool mode (issue #24): tools for a model that cannot call them natively.

Small local models behind llama.cpp, vLLM or Ollama often cannot call tools: their chat template
has no tool support (the server drops ``tools``), or the server enforces the call with a grammar
that lets the model ramble first and never reach it. Every such server does enforce a JSON schema
(``response_format: json_schema``), so in JSON mode a turn that offers tools asks, without
``tools``, for one schema-enforced action object built from the same tool definitions:

    {"action": "<tool name>", "arguments": {...}}   or   {"action": "final_answer", "answer": "..."}

and the reply is turned back into the native shape (a ``ToolCall``, or the answer as content), so
the workflow's agent loop, tool caps, history and replay are the same in both modes. The earlier
turns are sent as plain text, as the model wrote and read them: an action as its JSON, a tool's
output as a user message naming the call, because a template without tool support cannot render
tool messages.

Every string and array of the schema is bounded (``maxLength``/``maxItems``), the arguments'
strings sharing what the turn's output cap holds (:func:`argument_chars`), so a small model that
loops inside a value stops at the schema, not at the output cap. A ``url`` argument may only be
a URL the step found and no call has used yet (an ``enum`` of the request's ``url_choices``, which
the workflow keeps by where each URL came from: ``workflows/research/found_urls.py``), and a tool that needs
one is not offered while there is none: a small model makes URLs up (SmolLM2-135M on llama-server
crawled ``https://example.com/...`` and ``http#heat-pumps`` instead of searching, then crawled the
same URL until the step's turns ran out), so its first step action is a search, and no crawl repeats. A tool
the model has called twice with the same arguments is not offered again in the conversation (it
searched "heat pump" twelve times running): it is looping, and must use another tool or answer.

Pure: the offline fake model (``offline/json_tool_mode.py``) reads the same protocol back.
"""

from __future__ import annotations

import json
from typing import Any

from activities.model.lenient_json import Unrepairable, lenient_json
from workflows.contracts.chat import ChatMessage, ToolCall, ToolSpec
from workflows.contracts.json_tool_protocol import FINAL_ACTION, RESULT_HEADER, SCHEMA_NAME
from workflows.research.found_urls import URL_ARGUMENT
from workflows.text.untrusted_text import nested_deeper

# Bounds of the model's values. llama.cpp turns a schema into a grammar and refuses a repetition
# of 2,000 or more (llama-grammar.cpp: MAX_REPETITION_THRESHOLD; the request fails "failed to parse
# grammar", measured on llama-server), so every bound stays under it: a search query, a URL or a
# topic is far shorter, and an answer of 2,000 characters is what a small model (the reason for JSON
# mode) writes at its best.
LLAMA_CPP_REPETITION_LIMIT = 2_000
MAX_CHARS = LLAMA_CPP_REPETITION_LIMIT - 1
MAX_ARGUMENT_CHARS = MAX_CHARS
MAX_ARRAY_ITEMS = 16
CHARS_PER_TOKEN = 3  # an answer's bound from a small output cap, which then still comes first
MAX_ANSWER_CHARS = MAX_CHARS
SCALAR_CHARS = 24  # the longest number (or true, false, null) a reply's JSON holds
MIN_STRING_CHARS = 16  # a value shorter than this is of no use; a cap this small cannot hold an action anyway
MAX_DEPTH = 32  # an action nested deeper is no action (its arguments could not be carried: reply_safety.py)


def types_of(schema: dict[str, Any]) -> set[Any]:
    """The JSON types ``schema`` names (``type`` is one name or a list of them)."""
    kinds = schema.get("type")
    return set(kinds) if isinstance(kinds, list) else {kinds}


def bounded(schema: Any, max_chars: int = MAX_ARGUMENT_CHARS) -> Any:
    """A copy of ``schema`` in which every string has a ``maxLength`` and every array a ``maxItems``
    (bounds already there are kept when smaller)."""
    if isinstance(schema, list):
        return [bounded(item, max_chars) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {key: bounded(value, max_chars) if key != "const" and key != "enum" else value
            for key, value in schema.items()}
    kinds = types_of(copy)
    if "string" in kinds:
        copy["maxLength"] = min(int(copy.get("maxLength", max_chars)), max_chars)
    if "array" in kinds:
        copy["maxItems"] = min(int(copy.get("maxItems", MAX_ARRAY_ITEMS)), MAX_ARRAY_ITEMS)
    return copy


def may_answer(messages: list[ChatMessage]) -> bool:
    """Whether a JSON-mode turn may answer instead of acting: only once the conversation holds a
    tool's output, so a coordinator hands off (or asks) and a step agent searches (or runs code)
    before it answers. Measured on llama-server with SmolLM2-135M, a schema that allowed an answer
    at once had the coordinator answer 2 of 3 research questions itself, and the researcher answer
    every step of two runs without a search. The price, in JSON mode only: small talk is researched."""
    return any(message.role == "tool" for message in messages)


def answer_chars(messages: list[ChatMessage], output_cap: int) -> int | None:
    """The final answer's bound for a turn capped at ``output_cap`` tokens; None where it may not answer."""
    return min(output_cap * CHARS_PER_TOKEN, MAX_ANSWER_CHARS) if may_answer(messages) else None


def looping_tools(messages: list[ChatMessage]) -> set[str]:
    """The tools the conversation called twice with the same arguments."""
    calls = [(call.name, json.dumps(call.arguments, sort_keys=True)) for message in messages
             for call in message.tool_calls]
    return {name for name, arguments in calls if calls.count((name, arguments)) > 1}


def string_slots(schema: Any) -> int:
    """How many strings a value of ``schema`` (already bounded) can hold: an array counts its
    ``maxItems`` times, the alternatives of an ``anyOf`` as the largest of them."""
    if not isinstance(schema, dict) or "enum" in schema or "const" in schema:
        return 0
    if "anyOf" in schema:
        return max((string_slots(option) for option in schema["anyOf"]), default=0)
    kinds = types_of(schema)
    if "string" in kinds:
        return 1
    if "array" in kinds:
        return int(schema.get("maxItems", MAX_ARRAY_ITEMS)) * string_slots(schema.get("items"))
    return sum(string_slots(value) for value in (schema.get("properties") or {}).values())


def frame_chars(schema: Any) -> int:
    """The characters of the longest JSON value of ``schema`` (already bounded) with every free string
    empty: its keys, brackets, quotes and separators, the room left for the strings' own text."""
    if not isinstance(schema, dict):
        return SCALAR_CHARS
    choices = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if choices is not None:
        return max((len(json.dumps(choice)) for choice in choices), default=SCALAR_CHARS)
    if "anyOf" in schema:
        return max((frame_chars(option) for option in schema["anyOf"]), default=SCALAR_CHARS)
    kinds = types_of(schema)
    if "object" in kinds:
        members = (schema.get("properties") or {}).items()
        return 2 + sum(len(json.dumps(name)) + 4 + frame_chars(value) for name, value in members)
    if "array" in kinds:
        return 2 + int(schema.get("maxItems", MAX_ARRAY_ITEMS)) * (frame_chars(schema.get("items")) + 2)
    return 2 if kinds == {"string"} else SCALAR_CHARS


def argument_chars(spec: ToolSpec, output_cap: int | None) -> int:
    """Each string argument's bound for a turn capped at ``output_cap`` tokens: the cap's characters,
    less the action's frame, shared among every string the arguments can hold, so a model that loops
    inside its values stops at the schema before the cap cuts the action (SmolLM2 ran its plans to a
    256-token cap until the plan's bounds followed it)."""
    if output_cap is None:
        return MAX_ARGUMENT_CHARS
    parameters = bounded(spec.parameters or {"type": "object", "properties": {}})
    action = {"type": "object", "properties": {"action": {"const": spec.name}, "arguments": parameters}}
    share = (output_cap * CHARS_PER_TOKEN - frame_chars(action)) // max(1, string_slots(parameters))
    return max(MIN_STRING_CHARS, min(share, MAX_ARGUMENT_CHARS))


def _arguments(spec: ToolSpec, urls: list[str] | None, output_cap: int | None) -> dict[str, Any] | None:
    """``spec``'s arguments schema bounded for ``output_cap``, its ``url`` one of ``urls`` (None: any
    URL); None where the tool needs a URL and there is none."""
    schema = bounded(spec.parameters or {"type": "object", "properties": {}}, argument_chars(spec, output_cap))
    if urls is None or URL_ARGUMENT not in (schema.get("properties") or {}):
        return schema
    if not urls:
        return None if URL_ARGUMENT in schema.get("required", ()) else {
            **schema, "properties": {k: v for k, v in schema["properties"].items() if k != URL_ARGUMENT}}
    url = {**schema["properties"][URL_ARGUMENT], "enum": urls}
    return {**schema, "properties": {**schema["properties"], URL_ARGUMENT: url}}


def action_schema(tools: list[ToolSpec], max_answer_chars: int | None, urls: list[str] | None = None,
                  withheld: frozenset[str] = frozenset(), output_cap: int | None = None) -> dict[str, Any]:
    """One action object: a call of one of ``tools`` with its arguments bounded for ``output_cap``
    tokens (None: only by ``MAX_ARGUMENT_CHARS``), or the answer (none with ``max_answer_chars``
    None). With ``urls``, a ``url`` argument is one of them, and the ``withheld`` tools are left out
    (see the module's docstring); were no action left, the tools are offered as they are."""
    offered = [(spec, None if spec.name in withheld else _arguments(spec, urls, output_cap)) for spec in tools]
    if max_answer_chars is None and all(arguments is None for _, arguments in offered):
        offered = [(spec, _arguments(spec, None, output_cap)) for spec in tools]
    calls = [{"type": "object", "properties": {"action": {"const": spec.name}, "arguments": arguments},
              "required": ["action", "arguments"]} for spec, arguments in offered if arguments is not None]
    if max_answer_chars is None:
        return {"anyOf": calls}
    final = {"type": "object",
             "properties": {"action": {"const": FINAL_ACTION},
                            "answer": {"type": "string", "minLength": 1, "maxLength": max_answer_chars}},
             "required": ["action", "answer"]}
    return {"anyOf": [*calls, final]}


def response_format(tools: list[ToolSpec], messages: list[ChatMessage], output_cap: int,
                    url_choices: list[str]) -> dict[str, Any]:
    """The ``response_format`` of a JSON-mode turn of ``messages`` capped at ``output_cap`` tokens, whose
    ``url`` arguments may be ``url_choices``."""
    schema = action_schema(tools, answer_chars(messages, output_cap), url_choices,
                           frozenset(looping_tools(messages)), output_cap)
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "strict": False, "schema": schema}}


def instructions(tools: list[ToolSpec], answers: bool = True) -> str:
    """What the system prompt gains in JSON mode: the tools, and how to call them with a reply
    (and to answer, where the turn may; a turn without tools only answers)."""
    final = f'- to give your final answer: {{"action": "{FINAL_ACTION}", "answer": "<your whole answer>"}}'
    if not tools:
        return "\n".join(["", "", "# How to answer", "Reply with exactly one JSON object, and nothing else:", final])
    lines = ["", "", "# How to use tools",
             "You cannot call functions directly. Act by replying with exactly one JSON object, and nothing else:",
             '- to use a tool: {"action": "<tool name>", "arguments": {<the tool\'s arguments>}}',
             *([final] if answers else []),
             "One action per reply. The tool's output comes back in the next message, starting "
             '"Result of <tool name>". The tools:']
    for spec in tools:
        lines.append(f"- {spec.name}: {spec.description} Arguments (JSON schema): "
                     f"{json.dumps(spec.parameters, ensure_ascii=False)}")
    return "\n".join(lines)


def action_text(call: ToolCall) -> str:
    """A tool call as the model would have written it in JSON mode."""
    arguments: Any = call.arguments if call.invalid_arguments is None else call.invalid_arguments
    return json.dumps({"action": call.name, "arguments": arguments}, ensure_ascii=False)


def as_plain(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The conversation without tool-calling structure: calls as their JSON, outputs as user text."""
    plain = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            actions = "\n".join(action_text(call) for call in message.tool_calls)
            plain.append(ChatMessage(role="assistant", content=actions))
        elif message.role == "tool":
            header = RESULT_HEADER.format(name=message.name or "tool", call_id=message.tool_call_id or "call")
            plain.append(ChatMessage(role="user", content=header + message.content))
        else:
            plain.append(message)
    return plain


def _next_call_id(messages: list[ChatMessage]) -> str:
    """A call id unique in the conversation: the workflow pairs each output with its call by id."""
    made = sum(len(message.tool_calls) for message in messages if message.role == "assistant")
    return f"call_{made + 1}"


def parse_action(text: str, messages: list[ChatMessage]) -> tuple[str, list[ToolCall]]:
    """A JSON-mode reply as the native shape: (content, tool calls).

    Any other action is a ``ToolCall`` (of a tool not offered, or with arguments that are not an
    object: the agent loop answers it with an error the model reads); ``final_answer`` is the content.
    A reply that is no action object at all (a provider that ignored the schema; an action nested
    deeper than ``MAX_DEPTH``, which could not be carried) is content as it
    stands: for the coordinator a direct reply, for a step agent its answer.
    """
    try:
        data = lenient_json(text)  # a reply cut at the output cap is mended, not lost
    except Unrepairable:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("action"), str) or nested_deeper(data, MAX_DEPTH):
        return text, []
    action = data["action"]
    if action == FINAL_ACTION:
        answer = data.get("answer")
        return (answer if isinstance(answer, str) and answer.strip() else text), []
    arguments = data.get("arguments")
    call_id = _next_call_id(messages)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return "", [ToolCall(id=call_id, name=action, invalid_arguments=json.dumps(arguments))]
    return "", [ToolCall(id=call_id, name=action, arguments=arguments)]
