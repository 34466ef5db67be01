"""Sample model turns for the tests of the ``chat`` activity, shared so they cannot drift apart."""

from __future__ import annotations

from typing import Any

from activities.model.tool_support import PROBE_TOOL
from workflows.contracts.chat import ChatMessage, ChatRequest
from workflows.research.tools import HANDOFF_TO_PLANNER

# The coordinator's first turn: the fake model answers it with a handoff to the planner.
COORDINATOR = ChatRequest(
    prompt="coordinator", prompt_vars={"CURRENT_TIME": "now", "locale": "en-US"},
    messages=[ChatMessage(role="user", content="How do tides work?")], tools=[HANDOFF_TO_PLANNER],
)


def probe_requests(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool-support probe's requests among ``bodies`` (chat request bodies a fake model received):
    those offering the probe's own tool, which no agent offers."""
    name = PROBE_TOOL["function"]["name"]
    return [body for body in bodies if name in {tool["function"]["name"] for tool in body.get("tools") or []}]
