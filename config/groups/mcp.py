"""MCP servers (the operator's table), what they may run and reach, and the secret scrubber's extra names."""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, field_validator

from config.groups.base import SettingsGroup, comma_separated
from config.mcp_servers import MCPServerConfig, ServerName


class McpSettings(SettingsGroup):
    """The MCP tool activities' servers and guards (activities/mcp/)."""

    # MCP (config/mcp_servers.py). The servers are the operator's alone: conf.yaml's MCP_SERVERS
    # table, or the same table as JSON in MCP_SERVERS; requests pick them by name.
    mcp_servers: dict[ServerName, MCPServerConfig] = Field(default_factory=dict, alias="MCP_SERVERS")
    """The operator's MCP servers (a conf.yaml table, or the same as JSON); requests pick them by name. `${VAR}` in
    their `env` and `headers` is read from the environment or `.env`.
    """
    # Executables a stdio MCP server may be started with (names, or absolute paths by basename).
    mcp_allowed_commands: list[str] = Field(
        default_factory=lambda: ["npx", "uvx", "python", "python3", "node", "docker"],
        alias="DEERFLOW_MCP_ALLOWED_COMMANDS",
    )
    """Executables MCP stdio servers may be started with."""
    # Hosts, IPs or CIDR networks MCP URLs may reach although they are not public (as the crawler's).
    mcp_allow_hosts: list[str] = Field(default_factory=list, alias="DEERFLOW_MCP_ALLOW_HOSTS")
    """Hosts, IPs or CIDR networks MCP URLs may reach although they are not public."""
    # Extra worker variables whose values the secret scrubber (activities/guards/secret_scrubber.py) removes
    # from activity output, beyond the key/token/secret/password settings it finds by itself.
    secret_env_names: list[str] = Field(default_factory=list, alias="DEERFLOW_SECRET_ENV_NAMES")
    """Extra variables whose values are scrubbed from activity output and logs (beyond those named like a key, token,
    secret or password).
    """

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _parse_mcp_servers(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value)
        return value

    @field_validator("mcp_allow_hosts", mode="before")
    @classmethod
    def _split_mcp_hosts(cls, value: Any) -> Any:
        return comma_separated(value, lambda host: host.lower())

    # Not lower-cased, unlike hosts: variable and executable names are case-sensitive.
    @field_validator("secret_env_names", "mcp_allowed_commands", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        return comma_separated(value)
