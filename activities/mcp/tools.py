"""What the MCP activities (``activities/mcp/calls.py``) do: list a server's tools, call one.

How a server is reached is in two modules of its own: :mod:`activities.mcp.checks` (the operator's
definition, checked before any I/O, and the error types) and :mod:`activities.mcp.session` (one
client session per activity, its deadlines, and how its failures are sorted). Here:

* Each listing is recorded in history by the workflow, so replay never needs the live server.
* Failures are sorted for the retry policy: the server's own tool errors (``isError``, argument
  errors) are a normal ``MCPCallResult(is_error=True)`` the agent reads and can act on; an unknown or
  disabled tool is ``MCPUnknownTool`` (non-retryable).
* Results are capped (descriptions ~1,000 chars, tool output ~20,000) because both enter workflow
  history and the model's context.
"""

from __future__ import annotations

import json
from typing import Any

from mcp import ClientSession
from mcp import types as mcp_types
from mcp.shared.exceptions import MCPError
from temporalio import activity

from activities.guards.secret_scrubber import SecretScrubber
from activities.mcp import session as mcp_session
from activities.mcp.checks import operator_server, unknown_tool_error
from activities.mcp.session import Progress, finish_cleanup_on_cancel, with_session
from config.settings import Settings
from workflows.contracts.chat import ToolSpec
from workflows.contracts.mcp_naming import mcp_tool_name
from workflows.contracts.tool_activities import MCPCallRequest, MCPCallResult, MCPListRequest, MCPToolList

MAX_DESCRIPTION_CHARS = 1_000
MAX_RESULT_CHARS = 20_000
MAX_LIST_PAGES = 50  # a server whose cursor never ends cannot keep the activity busy


# ---------------------------------------------------------------- listing


def tool_spec(server_name: str, tool: mcp_types.Tool) -> ToolSpec:
    """What the model sees of one MCP tool: prefixed name, capped description, an object schema."""
    description = (tool.description or tool.title or "").strip()
    if not description:
        description = f"The {tool.name!r} tool of MCP server {server_name!r}."
    return ToolSpec(
        name=mcp_tool_name(server_name, tool.name),
        description=cap_with_count(description, MAX_DESCRIPTION_CHARS),
        parameters=object_schema(tool.input_schema),
    )


def object_schema(schema: Any) -> dict[str, Any]:
    """``schema`` as an OpenAI function-parameters schema: a JSON object schema with ``properties``."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return {"type": "object", "properties": {}}
    return {"type": "object", "properties": {}, **schema}


async def _list_all_tools(session: ClientSession, progress: Progress) -> list[mcp_types.Tool]:
    """Every tool the server lists, all pages; a server without tools support lists none."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    with progress.step("listing tools", mcp_session.LIST_TIMEOUT_SECONDS):
        for _ in range(MAX_LIST_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                page = await session.list_tools(params=params)
            except MCPError as exc:
                if exc.code == mcp_types.METHOD_NOT_FOUND:
                    return []
                raise
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
    return tools


def _enabled(
    tools: list[mcp_types.Tool], operator: list[str] | None, requested: list[str] | None
) -> list[mcp_types.Tool]:
    """The tools both the operator's and the request's ``enabled_tools`` admit (None admits all).

    The request can only narrow: a tool it names that the operator did not enable stays out.
    """
    for allowed in (operator, requested):
        if allowed is not None:
            tools = [tool for tool in tools if tool.name in set(allowed)]
    return tools


# ---------------------------------------------------------------- calling


def resolve_tool(server_name: str, requested: str, tools: list[mcp_types.Tool]) -> str:
    """The server's own name for ``requested``: the original name, or else its ``mcp_...`` exposed name."""
    names = [tool.name for tool in tools]
    if requested in names:
        return requested
    for name in names:
        if mcp_tool_name(server_name, name) == requested:
            return name
    raise unknown_tool_error(
        f"MCP server {server_name!r} has no enabled tool {requested!r} (enabled: {', '.join(names) or 'none'})."
    )


def format_content(result: mcp_types.CallToolResult) -> str:
    """The result as text for the model: text joined, other content as short placeholders, capped."""
    parts = [_content_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(part for part in parts if part)
    if not text:
        return "(the tool returned no content)"
    return cap_with_count(text, MAX_RESULT_CHARS)


def _content_text(block: Any) -> str:
    """One content block as text; binary content is described, not included."""
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
        return f"[{kind}: {block.mime_type}, about {len(block.data) * 3 // 4} bytes, not shown]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link: {block.uri}{f' ({block.name})' if block.name else ''}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return f"[resource: {resource.uri}]\n{resource.text}"
        return f"[resource: {resource.uri}, {resource.mime_type or 'binary'}, not shown]"
    return f"[{getattr(block, 'type', 'unknown')} content, not shown]"


def cap_with_count(text: str, limit: int) -> str:
    """At most ``limit`` characters, a cut marked with how much is missing, so the model knows the
    tool said more (unlike search's ``cap_text``, whose snippets need no count)."""
    if len(text) <= limit:
        return text
    marker = f"\u2026 [truncated {len(text) - limit} characters]"
    return text[: max(limit - len(marker), 0)].rstrip() + marker


async def list_tools(request: MCPListRequest, settings: Settings, scrubber: SecretScrubber) -> MCPToolList:
    """The server's tools as ToolSpecs named ``mcp_<server>_<tool>``, filtered by ``enabled_tools``.

    None when the operator did not add the server to ``request.agent`` (DeerFlow's ``add_to_agents``),
    decided here because the workflow does not see the operator's table.
    """
    server = operator_server(request.server_name, settings)
    if request.agent not in server.add_to_agents:
        return MCPToolList(server_name=request.server_name)

    async def work(session: ClientSession, progress: Progress) -> MCPToolList:
        specs: dict[str, ToolSpec] = {}
        listed = await _list_all_tools(session, progress)
        for tool in _enabled(listed, server.enabled_tools, request.enabled_tools):
            spec = tool_spec(request.server_name, tool)
            if spec.name in specs:
                activity.logger.warning(
                    "MCP server %r: tool %r shares the name %s with another tool; keeping the first",
                    request.server_name,
                    tool.name,
                    spec.name,
                )
                continue
            specs[spec.name] = spec
        return MCPToolList(server_name=request.server_name, tools=list(specs.values()))

    session = with_session(request.server_name, server, settings, scrubber, work)
    return await finish_cleanup_on_cancel(session)


async def call_tool(request: MCPCallRequest, settings: Settings, scrubber: SecretScrubber) -> MCPCallResult:
    """Call one tool (``request.tool``: its original name); the server's tool errors come back as is_error."""
    server = operator_server(request.server_name, settings)

    async def work(session: ClientSession, progress: Progress) -> MCPCallResult:
        tools = _enabled(await _list_all_tools(session, progress), server.enabled_tools, request.enabled_tools)
        name = resolve_tool(request.server_name, request.tool, tools)
        with progress.step(f"calling tool {name!r}", mcp_session.CALL_TIMEOUT_SECONDS):
            try:
                result = await session.call_tool(name, request.arguments)
            except MCPError as exc:
                if exc.code in (mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT):
                    raise
                # The server rejected this call (bad arguments, internal error): the agent can read
                # that and try differently; retrying the identical call would not help.
                return MCPCallResult(
                    content=cap_with_count(f"MCP error {exc.code}: {exc.message}", MAX_RESULT_CHARS), is_error=True
                )
            except RuntimeError as exc:
                # The SDK's check of structured output against the tool's declared schema failed.
                return MCPCallResult(content=cap_with_count(str(exc), MAX_RESULT_CHARS), is_error=True)
        return MCPCallResult(content=format_content(result), is_error=bool(result.is_error))

    session = with_session(request.server_name, server, settings, scrubber, work)
    return await finish_cleanup_on_cancel(session)
