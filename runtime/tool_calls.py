"""Which model tool call a tool activity runs, read back from history (the feed's cards, the inspection).

The activity's input carries no tool call id: the workflow turns a call's arguments into the
activity's request (workflows/tools.py), so a reader of history pairs them by those arguments.
"""

from __future__ import annotations

from typing import Any

from workflows.models import ToolCall


def runs_call(call: ToolCall, activity: str, request: Any) -> bool:
    """Whether the tool activity ``activity`` with input ``request`` runs this model tool call."""
    arguments = call.arguments
    if activity == "web_search":
        return call.name == "web_search" and arguments.get("query") == request.query
    if activity == "crawl_tool":
        return call.name == "crawl_tool" and arguments.get("url") == request.url
    if activity == "python_repl_tool":
        return call.name == "python_repl_tool" and arguments.get("code") == request.code
    if activity == "local_search_tool":
        return call.name == "local_search_tool" and arguments.get("query") == request.query
    return activity == "mcp_call_tool" and arguments == request.arguments
