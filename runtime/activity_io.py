"""Activities read back from history (the event feed, the inspection): what each takes and returns,
and which model tool call a tool activity runs.

The activity's input carries no tool call id: the workflow turns a call's arguments into the
activity's request (workflows/research/tools.py), so a reader of history pairs them by those arguments.
"""

from __future__ import annotations

from typing import Any

from workflows.contracts.chat import ChatRequest, ChatResponse, ToolCall
from workflows.contracts.run_config import RunConfig
from workflows.contracts.tool_activities import (
    CrawlRequest,
    CrawlResult,
    LocalSearchRequest,
    MCPCallRequest,
    MCPCallResult,
    MCPListRequest,
    MCPToolList,
    PythonRequest,
    PythonResult,
    SearchRequest,
    SearchResponse,
)

# Each activity's input and result types, to decode its payloads as the worker did.
INPUTS: dict[str, type[Any]] = {
    "chat": ChatRequest, "web_search": SearchRequest, "local_search_tool": LocalSearchRequest,
    "crawl_tool": CrawlRequest, "python_repl_tool": PythonRequest, "mcp_call_tool": MCPCallRequest,
    "mcp_list_tools": MCPListRequest, "load_run_config": list[str],
}
RESULTS: dict[str, type[Any]] = {
    "chat": ChatResponse, "web_search": SearchResponse, "local_search_tool": SearchResponse,
    "crawl_tool": CrawlResult, "python_repl_tool": PythonResult, "mcp_call_tool": MCPCallResult,
    "mcp_list_tools": MCPToolList, "load_run_config": RunConfig,
}


# Each tool activity's request type, and the argument of the model's tool call its request holds.
_TOOL_ARGUMENTS: dict[str, tuple[type[Any], str]] = {
    "web_search": (SearchRequest, "query"), "local_search_tool": (LocalSearchRequest, "query"),
    "crawl_tool": (CrawlRequest, "url"), "python_repl_tool": (PythonRequest, "code"),
}


def runs_call(call: ToolCall, activity: str, request: Any) -> bool:
    """Whether the tool activity ``activity`` with input ``request`` runs this model tool call. An
    input that is not its activity's request (one that did not decode as it) runs none."""
    if activity == "mcp_call_tool":
        return isinstance(request, MCPCallRequest) and call.arguments == request.arguments
    kind, argument = _TOOL_ARGUMENTS.get(activity, (None, ""))
    return (kind is not None and call.name == activity and isinstance(request, kind)
            and call.arguments.get(argument) == getattr(request, argument))
