"""The operator's MCP server table (``MCP_SERVERS`` in conf.yaml, or JSON in the env var).

Why only the operator: an MCP server definition names a program to run, an address to connect to,
and credentials to send. Whoever starts a workflow is not trusted with any of those, so a request
can only pick servers from this table by name (``ResearchRequest.mcp_servers``) and narrow their
tools; the activities look the definition up here, and no command, URL, env or header value ever
enters a workflow input or history.

``${VAR}`` placeholders in ``env`` and ``headers`` are filled from the worker's variables (its
environment and ``.env``), and only here: request data is never expanded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from workflows.contracts.mcp_choices import MCP_SERVER_NAME_PATTERN

ServerName = Annotated[str, StringConstraints(pattern=MCP_SERVER_NAME_PATTERN)]
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class MCPServerConfig(BaseModel):
    """One operator-defined MCP server, in DeerFlow's shape."""

    model_config = ConfigDict(extra="forbid")

    transport: Literal["stdio", "sse", "streamable_http"] = "stdio"
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    url: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    enabled_tools: list[str] | None = None  # the tools the operator allows; None: every tool listed
    add_to_agents: list[str] = Field(default_factory=lambda: ["researcher"])


class MissingVariable(Exception):
    """A ``${VAR}`` placeholder names a variable the worker's environment does not set."""

    def __init__(self, key: str, name: str) -> None:
        super().__init__(f"{key!r} refers to ${{{name}}}, but {name} is not set in the worker's environment or .env")
        self.name = name


def expand_placeholders(values: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """``values`` with every ``${VAR}`` replaced from the worker's variables (``Settings.variables``).

    A missing or empty variable raises ``MissingVariable``: a literal ``${VAR}`` sent as a token, or
    a blank credential, would only fail confusingly at the server.
    """
    expanded: dict[str, str] = {}
    for key, value in values.items():

        def substitute(match: re.Match[str], key: str = key) -> str:
            found = environ.get(match.group(1))
            if not found:
                raise MissingVariable(key, match.group(1))
            return found

        expanded[key] = _PLACEHOLDER.sub(substitute, value)
    return expanded


def placeholder_values(values: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    """The worker variables' values that ``${VAR}`` placeholders in ``values`` stand for."""
    names = {name for value in values.values() for name in _PLACEHOLDER.findall(value)}
    return [environ[name] for name in sorted(names) if environ.get(name)]
