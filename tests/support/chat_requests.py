"""Sample model turns for the tests of the ``chat`` activity, shared so they cannot drift apart."""

from __future__ import annotations

from workflows.models import ChatMessage, ChatRequest
from workflows.tools import HANDOFF_TO_PLANNER

# The coordinator's first turn: the fake model answers it with a handoff to the planner.
COORDINATOR = ChatRequest(
    prompt="coordinator", prompt_vars={"CURRENT_TIME": "now", "locale": "en-US"},
    messages=[ChatMessage(role="user", content="How do tides work?")], tools=[HANDOFF_TO_PLANNER],
)
