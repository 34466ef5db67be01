"""How the offline model reads and writes JSON tool mode (``activities/model/json_tools.py``; the
words both sides agree on are in ``workflows/contracts/json_tool_protocol.py``).

A JSON-mode request offers no ``tools``: it describes them in its schema and system prompt, sends
earlier calls as their JSON and tool outputs as "Result of …" user messages, and enforces one action
object as the reply. The scripted agents think in native tool calls, so the fake reads such a
request back into the native shape (:func:`native_view`), lets the agent answer, and writes the
answer as the action object the schema allows (:func:`action_reply`): a real small model on
llama-server does the same job with its grammar-constrained sampling. Like that grammar, the fake
never writes what the schema leaves out (:func:`conformed`): a tool not offered, a ``url`` not listed.
"""

from __future__ import annotations

import json
from itertools import takewhile
from typing import Any

from offline.agent_text import ScriptedReply, ScriptedToolCall, text_of
from workflows.contracts.json_tool_protocol import FINAL_ACTION, RESULT_RE, SCHEMA_NAME


def is_action_request(body: dict[str, Any]) -> bool:
    """Whether ``body`` asks for JSON tool mode's action object."""
    response_format = body.get("response_format") or {}
    return (response_format.get("type") == "json_schema"
            and (response_format.get("json_schema") or {}).get("name") == SCHEMA_NAME)


def _offered(schema: dict[str, Any]) -> list[dict[str, Any]]:
    tools = []
    for alternative in schema.get("anyOf") or []:
        properties = alternative.get("properties") or {}
        name = (properties.get("action") or {}).get("const")
        if name and name != FINAL_ACTION:
            tools.append({"type": "function", "function": {"name": name, "description": "",
                                                           "parameters": properties.get("arguments") or {}}})
    return tools


def _actions(content: str) -> list[dict[str, Any]] | None:
    """The action objects of an assistant message written in JSON mode (one a line), or None."""
    actions = []
    for line in content.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict) or "action" not in data:
            return None
        actions.append(data)
    return actions or None


def action_schema(body: dict[str, Any]) -> dict[str, Any]:
    """The action object's schema a JSON-mode request enforces."""
    return ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}


def native_view(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as a native tool-calling request: the schema's tools offered, calls and outputs
    in their own message shapes, and no response format (the agent answers as it would natively)."""
    schema = action_schema(body)
    messages: list[dict[str, Any]] = []
    made = 0
    for message in body.get("messages") or []:
        content = text_of(message.get("content"))
        actions = _actions(content) if message.get("role") == "assistant" else None
        result = RESULT_RE.match(content) if message.get("role") == "user" else None
        if actions is not None and actions[0]["action"] != FINAL_ACTION:
            calls = []
            for action in actions:
                made += 1
                calls.append({"id": f"call_{made}", "type": "function", "function": {
                    "name": action["action"], "arguments": json.dumps(action.get("arguments") or {})}})
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        elif result is not None:
            messages.append({"role": "tool", "tool_call_id": result["call_id"], "name": result["name"],
                             "content": content[result.end():]})
        else:
            messages.append(message)
    view = {key: value for key, value in body.items() if key != "response_format"}
    return {**view, "messages": messages, "tools": _offered(schema)}


def action_reply(reply: ScriptedReply) -> str:
    """The agent's reply as one action object: its first call (one action a reply), or its answer."""
    if reply.tool_calls:
        call = reply.tool_calls[0]
        return json.dumps({"action": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return json.dumps({"action": FINAL_ACTION, "answer": reply.content}, ensure_ascii=False)


GIVEN_UP = "I found nothing more I can use."  # the answer of a model whose call the schema left out


def conformed(reply: ScriptedReply, schema: dict[str, Any]) -> ScriptedReply:
    """``reply`` as llama-server's grammar lets the model write it: a call of a tool the schema does
    not offer becomes the answer where one is offered (else a call of the first tool offered), and a
    ``url`` outside the schema's list becomes the listed one sharing the longest beginning with it,
    as sampling constrained character by character ends where the grammar allows."""
    if not reply.tool_calls:
        return reply
    call = reply.tool_calls[0]
    options = {(option.get("properties") or {}).get("action", {}).get("const"): option
               for option in schema.get("anyOf") or []}
    if call.name not in options:
        if FINAL_ACTION in options:
            return ScriptedReply(content=GIVEN_UP, agent=reply.agent)
        call = ScriptedToolCall(call.id, next(iter(options)), call.arguments)
    parameters = (options[call.name].get("properties") or {}).get("arguments") or {}
    listed = ((parameters.get("properties") or {}).get("url") or {}).get("enum")
    if listed and call.arguments.get("url") not in listed:
        wanted = str(call.arguments.get("url", ""))
        nearest = max(listed, key=lambda url: _shared_beginning(url, wanted))
        call = ScriptedToolCall(call.id, call.name, {**call.arguments, "url": nearest})
    return ScriptedReply(tool_calls=(call, *reply.tool_calls[1:]), agent=reply.agent)


def _shared_beginning(first: str, second: str) -> int:
    """How many characters ``first`` and ``second`` begin with alike."""
    return sum(1 for _ in takewhile(lambda pair: pair[0] == pair[1], zip(first, second, strict=False)))
