"""The offline model's injectable faults: what each one is, and how it bends a scripted reply.

Tests inject a :class:`Fault` into :class:`offline.model_server.FakeModelServer` to prove the workflow
survives HTTP errors, timeouts, truncated bodies and bad model output. The faults that change the
transport (status, timeout, truncation, a window overflow, a loop without a cap) are played by the
server; those that change what the model says are applied to the scripted reply here
(:func:`apply_fault`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from offline.agent_text import ScriptedReply

INVALID_TOOL_ARGS = '{"query": "unterminated'
NON_JSON_PLAN = "I cannot produce a plan right now."
FAULT_KINDS = frozenset({"status", "timeout", "truncated", "empty", "invalid_tool_args", "non_json_plan",
                         "malformed_plan", "tool_call_flood", "loop", "plan_without_title", "empty_plan",
                         "no_research_plan", "context_overflow", "no_tool_call", "looping_plan", "reply",
                         "call"})
# What a small model looping sounds like (seen from SmolLM2-135M on llama-server).
LOOP_SENTENCE = "Solar power is a clean source of energy. "
LOOPED_PLAN_STRINGS = ("thought", "title", "description")  # what ``looping_plan`` loops in (a plan's and steps')
UNCAPPED_CHARS = 4096 * 4  # how far ``looping_plan`` writes for a request without a cap


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour, consumed by the next matching request.

    ``agent`` restricts the fault to requests for that DeerFlow agent; other requests pass it by,
    so a test can break "the planner's next call" without counting the calls before it.
    """

    kind: str
    status_code: int = 500
    message: str | None = None
    retry_after: float | None = None
    seconds: float = 0.0
    agent: str | None = None
    arguments: str = INVALID_TOOL_ARGS  # the raw argument text of ``invalid_tool_args``
    count: int = 1  # how many calls ``tool_call_flood`` makes
    n_ctx: int = 0  # the window ``context_overflow`` names
    content: str = ""  # what ``reply`` answers
    tool: str = ""  # the tool ``call`` calls, with ``arguments``

    def __post_init__(self) -> None:
        # A typo in a test's fault kind would otherwise silently behave like "no fault".
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {sorted(FAULT_KINDS)}")

    @classmethod
    def status(cls, code: int, message: str | None = None, *, retry_after: float | None = None,
               agent: str | None = None) -> Fault:
        """HTTP ``code`` with an OpenAI-style error body (and ``Retry-After`` if given)."""
        return cls("status", status_code=code, message=message, retry_after=retry_after, agent=agent)

    @classmethod
    def timeout(cls, seconds: float, *, agent: str | None = None) -> Fault:
        """Sleep ``seconds`` before answering, so the client's read timeout fires first."""
        return cls("timeout", seconds=seconds, agent=agent)

    @classmethod
    def truncated(cls, *, agent: str | None = None) -> Fault:
        """Promise a longer body than is sent, then close: the client sees a cut-off response
        (a streamed call: the server hangs up halfway through the deltas)."""
        return cls("truncated", agent=agent)

    @classmethod
    def empty(cls, *, agent: str | None = None) -> Fault:
        """A completion with empty content and no tool calls."""
        return cls("empty", agent=agent)

    @classmethod
    def invalid_tool_args(cls, *, arguments: str = INVALID_TOOL_ARGS, agent: str | None = None) -> Fault:
        """The tool call the agent would make, with these raw arguments (by default not JSON)."""
        return cls("invalid_tool_args", arguments=arguments, agent=agent)

    @classmethod
    def tool_call_flood(cls, count: int, *, agent: str | None = None) -> Fault:
        """The agent's first tool call, repeated ``count`` times in one reply."""
        return cls("tool_call_flood", count=count, agent=agent)

    @classmethod
    def non_json_plan(cls, *, agent: str | None = "planner") -> Fault:
        """The planner answers with prose that no JSON repair can turn into a plan."""
        return cls("non_json_plan", agent=agent)

    @classmethod
    def reply(cls, content: str, *, agent: str | None = None) -> Fault:
        """The model answers with ``content`` and no tool call, also in JSON tool mode (no action object
        around it): a hostile reply (a lone surrogate, JSON thousands of levels deep, a run of 60,000
        blanks) played as the provider would send it."""
        return cls("reply", agent=agent, content=content)

    @classmethod
    def call(cls, tool: str, arguments: dict[str, Any], *, agent: str | None = None) -> Fault:
        """The model calls ``tool`` with ``arguments`` whatever its script says: a small model's made-up
        call (a search for a URL it invented, then a crawl of it), played as that model would write it
        (in JSON tool mode only as far as the schema allows, as llama-server's grammar does)."""
        return cls("call", agent=agent, tool=tool, arguments=json.dumps(arguments))

    @classmethod
    def loop(cls, *, agent: str | None = None) -> Fault:
        """The model repeats one sentence until ``max_tokens`` (finish_reason "length"), or, when the
        request sends no cap, for ever: the client's read timeout ends it, as on a real server."""
        return cls("loop", agent=agent)

    @classmethod
    def plan_without_title(cls, *, agent: str | None = "planner") -> Fault:
        """The planner's plan as JSON, but without its ``title`` (what a small model wrote)."""
        return cls("plan_without_title", agent=agent)

    @classmethod
    def empty_plan(cls, *, agent: str | None = "planner") -> Fault:
        """The planner's plan with no steps, still claiming it needs research."""
        return cls("empty_plan", agent=agent)

    @classmethod
    def no_research_plan(cls, *, agent: str | None = "planner") -> Fault:
        """The planner claims it has enough context already (``has_enough_context: true``), no steps."""
        return cls("no_research_plan", agent=agent)

    @classmethod
    def context_overflow(cls, n_ctx: int, *, agent: str | None = None) -> Fault:
        """llama-server's 400 ``exceed_context_size_error`` naming the window ``n_ctx``."""
        return cls("context_overflow", n_ctx=n_ctx, agent=agent)

    @classmethod
    def no_tool_call(cls, *, agent: str | None = None) -> Fault:
        """The agent answers as if it had been offered no tools: a model that never calls them."""
        return cls("no_tool_call", agent=agent)

    @classmethod
    def malformed_plan(cls, *, agent: str | None = "planner") -> Fault:
        """The planner's plan in ```json fences with trailing commas and single-quoted keys."""
        return cls("malformed_plan", agent=agent)

    @classmethod
    def looping_plan(cls, *, agent: str | None = "planner") -> Fault:
        """The planner loops inside every string of its plan, as SmolLM2-135M did inside "thought" on
        llama-server: each runs to the request's schema ``maxLength`` (where llama.cpp's grammar
        closes it), or unbounded to the output cap, and its steps to the schema's ``maxItems``; a plan
        longer than the cap is cut there (finish_reason "length"), as the server cuts it."""
        return cls("looping_plan", agent=agent)


def requested_output_cap(body: dict[str, Any]) -> int | None:
    """The request's output cap, by either of the names OpenAI's API has used for it."""
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    return int(cap) if cap else None


def runs_to_cap(fault: Fault | None, content: str, body: dict[str, Any]) -> bool:
    """Whether ``fault`` made the model write to the request's output cap (finish_reason "length")."""
    if fault is None:
        return False
    return fault.kind == "loop" or (fault.kind == "looping_plan" and len(content) >= _cap_chars(body))


def _cap_chars(body: dict[str, Any]) -> int:
    """The request's output cap in the fake's characters (4 a token)."""
    cap = requested_output_cap(body)
    return cap * 4 if cap else UNCAPPED_CHARS


def _looping_plan(content: str, body: dict[str, Any]) -> str:
    """The scripted plan (JSON) with every looped string at its schema bound, cut at the output cap."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    plan, most = json.loads(content), schema.get("properties", {}).get("steps", {}).get("maxItems")
    steps = (plan["steps"] * most)[:most] if most else plan["steps"]
    step_properties = schema.get("$defs", {}).get("Step", {}).get("properties", {})
    plan = {**_looped(plan, schema.get("properties", {}), body),
            "steps": [_looped(step, step_properties, body) for step in steps]}
    return json.dumps(plan, ensure_ascii=False)[:_cap_chars(body)]


def _looped(values: dict[str, Any], properties: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each string of ``LOOPED_PLAN_STRINGS`` one sentence repeated to its bound."""
    looped = dict(values)
    for name in LOOPED_PLAN_STRINGS:
        if isinstance(values.get(name), str):
            chars = properties.get(name, {}).get("maxLength") or _cap_chars(body)
            looped[name] = (LOOP_SENTENCE * (chars // len(LOOP_SENTENCE) + 1))[:chars]
    return looped


def _edit_plan(content: str, drop: tuple[str, ...] = (), **changes: Any) -> str:
    """The scripted plan (JSON) with the ``drop`` keys removed and ``changes`` applied."""
    plan = {key: value for key, value in json.loads(content).items() if key not in drop}
    return json.dumps({**plan, **changes}, ensure_ascii=False)


def _mangle_plan(content: str) -> str:
    """Fenced JSON with single-quoted keys and trailing commas: broken, but json_repair fixes it."""
    broken = re.sub(r'(?m)^(\s*)"(\w+)":', r"\1'\2':", content)
    broken = re.sub(r"([^\s\[{,])(\n\s*[}\]])", r"\1,\2", broken)
    return f"Here is the plan:\n\n```json\n{broken}\n```"


def apply_fault(
    fault: Fault, reply: ScriptedReply, content: str, calls: list[tuple[str, str, str]], body: dict[str, Any]
) -> tuple[str, list[tuple[str, str, str]]]:
    """The reply (content, tool calls) as ``fault`` bends it; faults handled elsewhere leave it as is."""
    if fault.kind == "empty":
        return "", []
    if fault.kind == "invalid_tool_args":
        if calls:
            return "", [(cid, name, fault.arguments) for cid, name, _ in calls]
        tools = body.get("tools") or []
        if tools:  # the agent would have answered; break a call to its first tool instead
            return "", [("call_1", tools[0]["function"]["name"], fault.arguments)]
        return content, calls
    if fault.kind == "tool_call_flood" and calls:
        _, name, arguments = calls[0]
        return "", [(f"call_flood_{index}", name, arguments) for index in range(fault.count)]
    if fault.kind == "non_json_plan":
        return NON_JSON_PLAN, []
    if fault.kind == "reply":
        return fault.content, []
    if fault.kind == "call":
        made = sum(len(message.get("tool_calls") or []) for message in body.get("messages") or [])
        return "", [(f"call_{made + 1}", fault.tool, fault.arguments)]
    if fault.kind == "malformed_plan":
        return _mangle_plan(reply.content), []
    if fault.kind == "plan_without_title":
        return _edit_plan(reply.content, drop=("title",)), []
    if fault.kind == "empty_plan":
        return _edit_plan(reply.content, steps=[], has_enough_context=False), []
    if fault.kind == "no_research_plan":
        return _edit_plan(reply.content, steps=[], has_enough_context=True), []
    if fault.kind == "looping_plan":
        return _looping_plan(reply.content, body), []
    if fault.kind == "loop":
        cap = requested_output_cap(body) or 0
        return (LOOP_SENTENCE * (cap * 4 // len(LOOP_SENTENCE) + 1))[:cap * 4], []
    return content, calls
