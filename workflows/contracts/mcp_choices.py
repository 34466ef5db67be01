"""What a research request may say about MCP servers: picks of the operator's servers by name, and
the servers a front door left out (DeerFlow's UI sends its own list), which the run notes.

Kept apart from workflows/contracts/research.py, which imports them: the server definitions themselves are the
operator's (config/mcp_servers.py) and never part of a request.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from workflows.contracts.base import Contract

# Server names become part of model-facing tool names and of messages: keep them plain.
MCP_SERVER_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class MCPServerChoice(Contract):
    """A request's pick of one operator-defined MCP server (``MCP_SERVERS`` on the worker).

    Only the name and a narrower tool list: what the server runs, where it is and what credentials
    it gets are the operator's (config/mcp_servers.py), so none of it can come from a request.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=MCP_SERVER_NAME_PATTERN)
    # Tools to offer, among those the operator enables; None: all of those. Never widens the set.
    enabled_tools: list[str] | None = Field(default=None, max_length=100)
    # Agents to offer them to, among the operator's ``add_to_agents``; None: all of those. Never widens.
    add_to_agents: list[str] | None = Field(default=None, max_length=10)


class IgnoredMCPServer(Contract):
    """A server a client asked for that its front door did not pass on (DeerFlow's ``mcp_settings``
    naming one the operator did not configure, or defining it otherwise), and why: the run says so."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=200)
    reason: str = Field(max_length=300)


def ignored_mcp_note(ignored: list[IgnoredMCPServer]) -> str:
    listed = "; ".join(f"{server.name!r}: {server.reason}" for server in ignored)
    return f"MCP servers not used (only the operator's MCP_SERVERS can be): {listed}."


