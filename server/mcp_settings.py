"""DeerFlow's ``mcp_settings`` on a chat turn, as picks from the operator's MCP servers.

DeerFlow's UI sends every server enabled in its settings with its whole definition (transport,
command or URL, env or headers), the tools it listed when the server was added
(``enabled_tools``) and ``add_to_agents``. A definition from a request is never used (config/
mcp_servers.py): a server is passed on by name when it is one of the operator's and the definition
sent agrees with the operator's (the check the "add server" dialog got, server/mcp_check.py); its
``enabled_tools`` and ``add_to_agents`` then narrow the operator's, never widen them. Every other
server is left out, with the reason, which the run notes in its status and the turn says first.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from config.settings import Settings
from server.mcp_check import MetadataRequest, why_not_the_operators
from workflows.contracts.mcp_choices import IgnoredMCPServer, MCPServerChoice

MAX_SERVERS = 20  # ResearchRequest.mcp_servers' bound, and ignored_mcp_servers'
MAX_CHOSEN_TOOLS = 100  # MCPServerChoice.enabled_tools' bound
SHOWN_NAME_CHARS = 100


class DeerFlowMCPSettings(BaseModel):
    """``{"servers": {"<name>": {...}}}``; each server is read on its own, so one broken entry is
    left out with its reason instead of refusing the turn."""

    model_config = ConfigDict(extra="ignore")

    servers: dict[StrictStr, Any] = Field(default_factory=dict, max_length=MAX_SERVERS)


class EnabledServer(MetadataRequest):
    """One server of DeerFlow's ``mcp_settings``: the definition, and what its settings narrow."""

    enabled_tools: list[StrictStr] | None = Field(default=None, max_length=10_000)
    add_to_agents: list[StrictStr] | None = Field(default=None, max_length=20)


def _choice(name: str, body: Any, settings: Settings) -> MCPServerChoice | str:
    """The pick of the operator's ``name`` that ``body`` asks for, or why there is none."""
    try:
        server = EnabledServer.model_validate(body)
    except ValidationError as error:
        first = error.errors()[0]
        return f"not in DeerFlow's shape ({'.'.join(map(str, first['loc']))}: {first['msg']})"
    if (reason := why_not_the_operators(name, server, settings)) is not None:
        return reason
    operator = settings.mcp_servers[name]
    agents = None
    if server.add_to_agents is not None:
        agents = [agent for agent in operator.add_to_agents if agent in server.add_to_agents]
        if not agents:
            return (f"its add_to_agents ({', '.join(server.add_to_agents)}) name none of the operator's "
                    f"({', '.join(operator.add_to_agents) or 'none'})")
    # DeerFlow's list is every tool the server had when it was added: over the bound, the operator's own list
    tools = server.enabled_tools if server.enabled_tools is None or len(server.enabled_tools) <= MAX_CHOSEN_TOOLS \
        else None
    return MCPServerChoice(name=name, enabled_tools=tools, add_to_agents=agents)


def mcp_picks(mcp_settings: DeerFlowMCPSettings | None, settings: Settings,
              ) -> tuple[list[MCPServerChoice], list[IgnoredMCPServer]]:
    """The operator's servers the turn enables, and the servers it enables that are left out."""
    chosen: list[MCPServerChoice] = []
    ignored: list[IgnoredMCPServer] = []
    for name, body in (mcp_settings.servers if mcp_settings else {}).items():
        picked = _choice(name, body, settings)
        if isinstance(picked, MCPServerChoice):
            chosen.append(picked)
        else:
            shown = name if len(name) <= SHOWN_NAME_CHARS else f"{name[:SHOWN_NAME_CHARS]}…"
            ignored.append(IgnoredMCPServer(name=shown, reason=picked))
    return chosen, ignored
