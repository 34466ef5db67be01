"""``POST /api/mcp/server/metadata``: DeerFlow's "add MCP server" check, for the operator's servers only.

DeerFlow starts whatever program or URL the request names (when ENABLE_MCP_SERVER_CONFIGURATION
is set). Here a request never defines a server: it may name one from the operator's table
(config/mcp_servers.py), and a definition it sends must agree with the operator's (transport,
command, args, url); the tools are listed by ``McpServerCheckWorkflow`` through the same
``mcp_list_tools`` activity a research run uses. Anything else is a 403 whose ``detail`` says why.

DeerFlow's add-server dialog never shows that ``detail``: its ``queryMCPServerMetadata`` reads only
``response.ok`` and throws ``HTTP error! status: 403``, which the dialog logs to the console, showing
"Failed to add server: NAME" built from the name the person typed (the refresh and enable paths log
and show nothing). No status, reason phrase or field of a refusal reaches the screen, and a 200 would
add the server as enabled, so the refusal stays a 403; the server logs it with its reason, and a run
sent a refused server says in its first message which servers it ignored and why
(server/mcp_settings.py). The answer echoes only what the request sent, never the operator's env or
headers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr
from temporalio.client import Client

from config.settings import Settings
from server.flows import flow_result, start_flow
from server.security import RequestError, log
from workflows.content.mcp_checker import MCP_CHECK_WORKFLOW
from workflows.contracts.decisions import Actor
from workflows.contracts.mcp_naming import MCP_TOOL_PREFIX, sanitize_name_part
from workflows.contracts.tool_activities import MCPListRequest, MCPToolList

NOT_CONFIGURED = ("Only MCP servers the operator configured can be added here (MCP_SERVERS in conf.yaml or "
                  "the environment)")
DEFINITION_FIELDS = ("transport", "command", "args", "url")


class MetadataRequest(BaseModel):
    """DeerFlow's body (its UI adds ``name``); values are only compared, never used."""

    model_config = ConfigDict(extra="ignore")

    name: StrictStr | None = Field(default=None, max_length=200)
    transport: Literal["stdio", "sse", "streamable_http"]
    command: StrictStr | None = Field(default=None, max_length=4096)
    args: list[StrictStr] | None = Field(default=None, max_length=256)
    url: StrictStr | None = Field(default=None, max_length=4096)
    env: dict[StrictStr, StrictStr] | None = Field(default=None, max_length=256)
    headers: dict[StrictStr, StrictStr] | None = Field(default=None, max_length=256)
    timeout_seconds: int | None = Field(default=None, ge=1, le=3600)
    sse_read_timeout: int | None = Field(default=None, ge=1, le=3600)


def why_not_the_operators(name: str, request: MetadataRequest, settings: Settings) -> str | None:
    """Why the server ``request`` defines is not the operator's ``name`` (None: it is). A definition
    the request sends must agree with the operator's, so nobody is shown one program and given another."""
    server = settings.mcp_servers.get(name)
    if server is None:
        return "not one of the operator's servers" if name else "no server named"
    for field in DEFINITION_FIELDS:
        value = getattr(request, field)
        if value not in (None, []) and value != getattr(server, field):
            return f"its {field} differs from the operator's definition"
    return None


def operator_server_for(request: MetadataRequest, settings: Settings) -> tuple[str, str | None]:
    """The operator's server the request names, and the agent to list it for; 403 otherwise."""
    name = request.name or ""
    if (reason := why_not_the_operators(name, request, settings)) is not None:
        log.warning("MCP server check refused %r: %s", name, reason)  # DeerFlow's dialog shows only the name
        raise RequestError(f"{NOT_CONFIGURED}: {name + ': ' if name else ''}{reason}.", 403)
    server = settings.mcp_servers[name]
    return name, (server.add_to_agents[0] if server.add_to_agents else None)


def _tool(server: str, spec_name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    prefix = f"{MCP_TOOL_PREFIX}{sanitize_name_part(server)}_"
    return {"name": spec_name.removeprefix(prefix), "description": description, "inputSchema": schema}


async def metadata(client: Client, settings: Settings, body: Any, who: Actor) -> dict[str, Any]:
    request = MetadataRequest.model_validate(body)
    name, agent = operator_server_for(request, settings)
    tools: list[dict[str, Any]] = []
    if agent is not None:
        handle = await start_flow(client, settings, MCP_CHECK_WORKFLOW, MCPListRequest(server_name=name, agent=agent),
                                  MCPToolList, "mcp check", who)
        listed = await flow_result(handle, settings, "MCP server check")
        tools = [_tool(name, spec.name, spec.description, spec.parameters) for spec in listed.tools]
    return {**request.model_dump(exclude={"name", "timeout_seconds", "sse_read_timeout"}), "name": name,
            "tools": tools}
