"""Checking an MCP server's definition before anything is spawned or connected, and the MCP errors.

* Servers are the operator's (``MCP_SERVERS``, config/mcp_servers.py): the workflow passes only a
  server name, the agent and a narrower tool list, and the definition is looked up here, so no
  command, URL, env or header value enters history. An unknown name is ``MCPConfigError``.
* The definition is still checked before anything is spawned or connected, since a typo in it should
  not run something else: a stdio ``command`` must be on ``DEERFLOW_MCP_ALLOWED_COMMANDS`` (an absolute
  path is judged by its basename), contain no shell metacharacters, and is run without a shell; URLs
  pass the crawler's address guard (public addresses only, unless in ``DEERFLOW_MCP_ALLOW_HOSTS``). A
  refusal is ``MCPConfigError`` (non-retryable): no retry can fix it.
* Secrets stay on the worker: ``env`` and ``headers`` values may be ``${VAR}`` placeholders, expanded
  here from the worker's environment. The stdio child gets a minimal environment (PATH, HOME, LANG,
  plus the MCP SDK's own short safe list: LOGNAME, SHELL, TERM, USER) and the configured ``env``,
  never the worker's API keys.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from temporalio.exceptions import ApplicationError

from activities.guards.url_guard import HostNotFound, UrlRefused, validate_url
from config.mcp_servers import MCPServerConfig, MissingVariable, expand_placeholders
from config.settings import Settings

CONFIG_ERROR = "MCPConfigError"
UNAVAILABLE = "MCPUnavailable"
UNKNOWN_TOOL = "MCPUnknownTool"

CHILD_ENV_VARS = ("PATH", "HOME", "LANG")  # what a stdio server inherits from the worker

# A bare executable name, or an absolute path of plain segments. Anything else (spaces, ;, |, &, $,
# quotes, globs, redirections, newlines...) is refused outright rather than escaped: no shell runs
# the command, so such a value is either a mistake or an attempt to smuggle a second command in.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")
_SAFE_PATH = re.compile(r"^(/[A-Za-z0-9_.+-]+)+$")


def config_error(message: str) -> ApplicationError:
    """The server configuration is refused or broken: only a human can fix it, so no retry."""
    return ApplicationError(message, type=CONFIG_ERROR, non_retryable=True)


def unavailable_error(message: str) -> ApplicationError:
    """The server could not be started, reached or heard from in time: Temporal's backoff retries it."""
    return ApplicationError(message, type=UNAVAILABLE)


def unknown_tool_error(message: str) -> ApplicationError:
    """The model asked for a tool the server does not offer (or that is not enabled): retrying cannot help."""
    return ApplicationError(message, type=UNKNOWN_TOOL, non_retryable=True)



def check_command(command: str | None, allowed: list[str]) -> str:
    """The stdio ``command`` if the allowlist admits it; ``MCPConfigError`` otherwise.

    An absolute path is admitted by its basename (``/usr/bin/python3`` as ``python3``); a relative
    path is refused because what it runs depends on the worker's working directory.
    """
    if not command:
        raise config_error("An MCP server with transport 'stdio' needs a 'command'.")
    if "/" in command:
        if not _SAFE_PATH.match(command) or os.path.normpath(command) != command:
            raise config_error(
                f"MCP command {command!r} is refused: give an executable name or a plain absolute path "
                "(no shell metacharacters, no relative or '..' segments)."
            )
        name = os.path.basename(command)
    else:
        if not _SAFE_NAME.match(command):
            raise config_error(
                f"MCP command {command!r} is refused: it contains characters a shell would interpret; "
                "put arguments in 'args'."
            )
        name = command
    if name not in allowed:
        raise config_error(
            f"MCP command {command!r} is not allowed on this worker (allowed: {', '.join(allowed) or 'none'}; "
            "set DEERFLOW_MCP_ALLOWED_COMMANDS to change the list)."
        )
    return command


def check_args(args: list[str]) -> list[str]:
    """Arguments pass to the executable verbatim (no shell); only NUL bytes cannot be passed at all."""
    if any("\0" in arg for arg in args):
        raise config_error("MCP server arguments must not contain NUL bytes.")
    return args


async def check_url(url: str | None, transport: str, allow_hosts: list[str]) -> str:
    """An http(s) URL whose host resolves only to public addresses (or is allow-listed).

    The crawler's guard, so an MCP URL cannot reach the metadata service, the worker's loopback or
    the private network unless the operator lists the host in ``DEERFLOW_MCP_ALLOW_HOSTS``.
    """
    if not url:
        raise config_error(f"An MCP server with transport {transport!r} needs a 'url'.")
    try:
        await validate_url(url, allow_hosts)
    except UrlRefused as exc:
        raise config_error(f"MCP server URL refused ({exc}); DEERFLOW_MCP_ALLOW_HOSTS can allow the host.") from exc
    except HostNotFound as exc:
        make = unavailable_error if exc.transient else config_error
        raise make(f"MCP server URL {url!r}: {exc}") from exc
    return url


def expand(values: dict[str, str], what: str, variables: Mapping[str, str]) -> dict[str, str]:
    """The operator's ``${VAR}`` placeholders filled in from the worker's ``variables``; a missing
    variable is a config error."""
    try:
        return expand_placeholders(values, variables)
    except MissingVariable as exc:
        raise config_error(f"MCP {what} {exc}") from exc


def check_env(env: dict[str, str]) -> dict[str, str]:
    """Names and values that an environment can hold."""
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise config_error(f"MCP env entry {name!r} is not a valid environment variable.")
    return env


def check_headers(headers: dict[str, str]) -> dict[str, str]:
    """No line breaks: a header value must not be able to start another header."""
    for name, value in headers.items():
        if not name or any(char in name + value for char in "\r\n\0"):
            raise config_error(f"MCP header {name!r} contains a line break or NUL byte.")
    return headers


def child_environment(configured: dict[str, str]) -> dict[str, str]:
    """The stdio server's environment: a few harmless worker variables plus what was configured.

    Process plumbing, not configuration: a child needs the worker's own PATH, HOME and LANG, which
    are not settings and which .env must not move, so they come from the process's environment."""
    base = {name: os.environ[name] for name in CHILD_ENV_VARS if os.environ.get(name)}
    return base | configured


@dataclass(frozen=True)
class ConnectionPlan:
    """A validated way to reach one server; building it is all the checking, and does no I/O."""

    server_name: str
    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """How error messages name the server."""
        return f"MCP server {self.server_name!r}"


def operator_server(server_name: str, settings: Settings) -> MCPServerConfig:
    """The operator's definition of ``server_name``; naming any other server is a config error."""
    server = settings.mcp_servers.get(server_name)
    if server is None:
        known = ", ".join(sorted(settings.mcp_servers)) or "none"
        raise config_error(
            f"MCP server {server_name!r} is not configured on this worker (configured: {known}; "
            "the operator defines servers in MCP_SERVERS)."
        )
    return server


async def plan_connection(server_name: str, server: MCPServerConfig, settings: Settings) -> ConnectionPlan:
    """Check a server configuration completely, before anything is spawned or connected."""
    if server.transport == "stdio":
        command = check_command(server.command, settings.mcp_allowed_commands)
        args = check_args(list(server.args))
        env = check_env(expand(server.env, "env entry", settings.variables()))
        return ConnectionPlan(server_name, "stdio", command=command, args=tuple(args), env=tuple(env.items()))
    url = await check_url(server.url, server.transport, settings.mcp_allow_hosts)
    headers = check_headers(expand(server.headers, "header", settings.variables()))
    return ConnectionPlan(server_name, server.transport, url=url, headers=tuple(headers.items()))
