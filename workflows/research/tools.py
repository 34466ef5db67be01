"""Every tool described once: its name, the JSON schema the model sees, and how it runs.

The names follow DeerFlow's. A tool that does I/O runs as its own activity; this module only
builds the activity's input and turns its output (or failure) into the tool message the model
reads. A failing tool never fails the run: the model is told what went wrong and carries on.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import (
        CRAWL,
        LOCAL_SEARCH,
        MCP_CALL_TOOL,
        MCP_LIST_TOOLS,
        PYTHON,
        WEB_SEARCH,
        execute,
    )
    from workflows.calls.errors import failure_message
    from workflows.calls.queues import OWN_QUEUES, QueueRouting
    from workflows.contracts.chat import ToolCall, ToolSpec
    from workflows.contracts.mcp_choices import MCPServerChoice
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
    from workflows.research.found_urls import FoundUrls, url_key, urls_in
    from workflows.research.search_format import format_crawl_result, format_search_response
    from workflows.research.tool_format import format_python_result

HANDOFF_TO_PLANNER = ToolSpec(
    name="handoff_to_planner",
    description="Hand a research request to the planner, which designs a research plan for it.",
    parameters={
        "type": "object",
        "properties": {
            "research_topic": {"type": "string", "description": "The topic to research, in one sentence."},
            "locale": {"type": "string", "description": "The user's locale, e.g. en-US or zh-CN."},
        },
        "required": ["research_topic", "locale"],
    },
)

ASK_CLARIFICATION = ToolSpec(
    name="ask_clarification",
    description="Ask the user one focused question when the request is too vague to research well.",
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question to ask the user."}},
        "required": ["question"],
    },
)


@dataclass(frozen=True)
class ToolContext:
    """Per-run facts and state a tool needs that the model does not choose."""

    max_search_results: int
    resources: tuple[str, ...] = ()
    # Crawls of this run by normalised URL: a page is fetched once per run, and a second call
    # (even a concurrent one) reuses the first one's result without another activity.
    crawls: dict[str, asyncio.Task[CrawlResult]] = field(default_factory=dict)
    # What this step found, from its task and its tools' results: the only URLs it may crawl.
    found: FoundUrls = field(default_factory=FoundUrls)
    # MCP tools offered in this step: model-facing name -> the request's choice of its server.
    mcp_routes: dict[str, MCPServerChoice] = field(default_factory=dict)
    # The plan step (1-based) the agent works on, for the timeline's activity summaries.
    step_number: int | None = None
    # Where the run schedules each kind of work; its model turns go there too (workflows/research/agent_loop.py).
    routing: QueueRouting = OWN_QUEUES
    # The tools the step's agent ran, by name, in order: a research step that ran none says so.
    ran: list[str] = field(default_factory=list)


ToolExecutor = Callable[[dict[str, Any], ToolContext], Awaitable[str]]

async def search(query: str, max_results: int, routing: QueueRouting) -> SearchResponse:
    """The ``web_search`` activity; also used by the background investigation."""
    return await execute(WEB_SEARCH, SearchRequest(query=query, max_results=max_results), SearchResponse,
                         routing=routing)


async def _web_search(arguments: dict[str, Any], context: ToolContext) -> str:
    response = await search(str(arguments["query"]), context.max_search_results, context.routing)
    context.found.add(result.url for result in response.results)
    return format_search_response(response)


# Runs recorded before it crawled any URL the model gave; now only one the step found
# (workflows/research/found_urls.py).
FOUND_URLS_ONLY_PATCH = "found-urls-only"
UNFOUND_URL_MESSAGE = ("Error: crawl_tool reads only a URL this step found: in the question, the plan, a "
                       "search's results, the user's documents or a page read before. Search for the page first.")


async def _crawl(arguments: dict[str, Any], context: ToolContext) -> str:
    url = str(arguments["url"])
    if not context.found.holds(url) and workflow.patched(FOUND_URLS_ONLY_PATCH):
        return UNFOUND_URL_MESSAGE
    key = url_key(url)
    if key not in context.crawls:
        context.crawls[key] = asyncio.ensure_future(
            execute(CRAWL, CrawlRequest(url=url), CrawlResult, routing=context.routing))
    page = await asyncio.shield(context.crawls[key])
    context.found.add([page.url, *urls_in(page.markdown)])
    return format_crawl_result(page)


async def _local_search(arguments: dict[str, Any], context: ToolContext) -> str:
    request = LocalSearchRequest(query=str(arguments["query"]), resources=list(context.resources),
                                 max_results=context.max_search_results)
    response = await execute(LOCAL_SEARCH, request, SearchResponse, routing=context.routing)
    context.found.add(url for result in response.results for url in [result.url, *urls_in(result.content)])
    return format_search_response(response)


async def _python(arguments: dict[str, Any], context: ToolContext) -> str:
    request = PythonRequest(code=str(arguments["code"]))
    # Model-written code runs only on the sandbox worker (workflows/calls/queues.py).
    summary = f"{PYTHON.name} · step {context.step_number}" if context.step_number is not None else None
    result = await execute(PYTHON, request, PythonResult, routing=context.routing, summary=summary)
    return format_python_result(result, timeout_seconds=request.timeout_seconds)


@dataclass(frozen=True)
class ToolDefinition:
    spec: ToolSpec
    execute: ToolExecutor


def _string_tool(name: str, description: str, argument: str, argument_description: str) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {argument: {"type": "string", "description": argument_description}},
            "required": [argument],
        },
    )


TOOLS: dict[str, ToolDefinition] = {
    "web_search": ToolDefinition(
        _string_tool("web_search", "Search the web. Returns titles, URLs and snippets of the best results.",
                     "query", "What to search for."),
        _web_search,
    ),
    "local_search_tool": ToolDefinition(
        _string_tool("local_search_tool",
                     "Search the user's own documents (the resources given for this research). Prefer it.",
                     "query", "What to look for in the documents."),
        _local_search,
    ),
    "crawl_tool": ToolDefinition(
        _string_tool("crawl_tool", "Fetch a web page or PDF and return its main text as markdown.",
                     "url", "The http(s) URL to read."),
        _crawl,
    ),
    "python_repl_tool": ToolDefinition(
        _string_tool("python_repl_tool",
                     "Run Python code in a sandbox and return what it prints. Use print() for results.",
                     "code", "A complete Python program."),
        _python,
    ),
}


def tool_specs(names: tuple[str, ...]) -> list[ToolSpec]:
    return [TOOLS[name].spec for name in names]


async def mcp_tools_for(agent_name: str, servers: list[MCPServerChoice], routing: QueueRouting,
                        ) -> tuple[list[ToolSpec], dict[str, MCPServerChoice]]:
    """List the MCP tools of every server the request picked, for this agent, once per step.

    Only names travel: the activity looks each server up in the operator's table and lists nothing
    for an agent the operator did not add it to (nor is it asked for one the request left out). The
    listing is an activity, so its result is in history and replay never needs the server. A server
    that cannot be listed (or is unknown) is skipped and logged; of two tools with the same
    model-facing name the first is kept.
    """
    specs: list[ToolSpec] = []
    routes: dict[str, MCPServerChoice] = {}
    for choice in servers:
        if choice.add_to_agents is not None and agent_name not in choice.add_to_agents:
            continue  # the request narrowed the operator's agents; the activity checks the operator's
        try:
            listed = await execute(
                MCP_LIST_TOOLS,
                MCPListRequest(server_name=choice.name, agent=agent_name, enabled_tools=choice.enabled_tools),
                MCPToolList,
                routing=routing,
            )
        except ActivityError as error:
            workflow.logger.warning("MCP server %s unavailable: %s", choice.name, failure_message(error))
            continue
        for spec in listed.tools:
            if spec.name not in routes and spec.name not in TOOLS:
                specs.append(spec)
                routes[spec.name] = choice
    return specs, routes


async def _mcp_call(call: ToolCall, context: ToolContext) -> str:
    choice = context.mcp_routes[call.name]
    request = MCPCallRequest(server_name=choice.name, tool=call.name, arguments=call.arguments,
                             enabled_tools=choice.enabled_tools)
    result = await execute(MCP_CALL_TOOL, request, MCPCallResult, routing=context.routing)
    return f"Error: {result.content}" if result.is_error else result.content


async def run_tool_call(call: ToolCall, allowed: tuple[str, ...], context: ToolContext) -> str:
    """Run one tool call and return the tool message text; errors become readable messages."""
    if call.invalid_arguments is not None:
        return (f"Error: the arguments for {call.name} were not valid JSON (a JSON object of named arguments "
                f"is required): {call.invalid_arguments[:200]}")
    if call.name in context.mcp_routes:
        try:
            return await _mcp_call(call, context)
        except ActivityError as error:
            return f"Error: {call.name} failed: {failure_message(error)}"
    if call.name not in allowed or call.name not in TOOLS:
        offered = [*allowed, *context.mcp_routes]
        return f"Error: unknown tool {call.name!r}. Available tools: {', '.join(offered) or 'none'}."
    required = TOOLS[call.name].spec.parameters.get("required", [])
    missing = [name for name in required if name not in call.arguments]
    if missing:
        return f"Error: {call.name} needs argument(s) {', '.join(missing)}; got {json.dumps(call.arguments)[:200]}"
    try:
        return await TOOLS[call.name].execute(call.arguments, context)
    except ActivityError as error:
        workflow.logger.warning("Tool %s failed: %s", call.name, failure_message(error))
        return f"Error: {call.name} failed: {failure_message(error)}"
