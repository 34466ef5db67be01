"""Activities read back from history (the event feed, the inspection): what each takes and returns,
and which model tool call a tool activity runs.

The activity's input carries no tool call id: the workflow turns a call's arguments into the
activity's request (workflows/tools.py), so a reader of history pairs them by those arguments.
"""

from __future__ import annotations

from typing import Any

from workflows.models import (
    ChatRequest,
    ChatResponse,
    CrawlRequest,
    CrawlResult,
    LocalSearchRequest,
    MCPCallRequest,
    MCPCallResult,
    MCPListRequest,
    MCPToolList,
    PythonRequest,
    PythonResult,
    RunConfig,
    SearchRequest,
    SearchResponse,
    ToolCall,
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
