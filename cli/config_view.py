"""``starter.py config``: the effective configuration, where each value came from, secrets masked
(and any value that holds one: config/secrets.py).

It starts with the Temporal service the command would reach (address, namespace, TLS and API key on or
off) and shows the named API tokens by name and role, never their values: what an operator checks
first after a deploy.

The settings were already checked by ``starter.py`` before any command ran (a problem is one line and
exit code 2), so reaching this command means they are valid: it prints them and exits 0.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from config.groups.web import NamedToken
from config.secrets import is_secret
from config.settings import Settings
from runtime.connection import load_connection


def lines(settings: Settings) -> list[str]:
    """One ``NAME = value  (source)`` line per setting, in the settings' order."""
    sources = settings.sources()
    out = []
    for name, field in Settings.model_fields.items():
        env_name = field.alias or name.upper()
        value: Any = getattr(settings, name)
        if env_name == "DEERFLOW_WEB_TOKENS":
            shown = ", ".join(map(holder, value)) or "[]"
        elif value is not None and (is_secret(env_name) or env_name == "MCP_SERVERS"):
            # MCP server tables carry their own env and headers (tokens): only their names are shown.
            shown = f"[{', '.join(value)}]" if env_name == "MCP_SERVERS" else "***"
        else:  # a value that came from a secret (a key as the model name) is masked too (config/secrets.py)
            dumped = settings.model_dump(mode="json", include={name})[name]
            shown = settings.shown(env_name, dumped if isinstance(dumped, str) else json.dumps(dumped))
        out.append(f"{env_name} = {shown}  ({sources.get(env_name, 'default')})")
    return out


def holder(token: NamedToken) -> str:
    """A named token as its holder and what it may do, e.g. ``ann (reviewer)``."""
    return f"{token.name} ({token.role.value if token.role else 'own runs only'})"


def temporal_lines(settings: Settings) -> list[str]:
    """Where the CLI, the worker and the API server connect, and how (secured or not), without the key."""
    connection = load_connection(settings)
    tls = "on" if connection.connect_config.get("tls") else "off"
    return [f"TEMPORAL_ADDRESS = {connection.address}  ({connection.address_source})",
            f"TEMPORAL_NAMESPACE = {connection.namespace}  ({connection.namespace_source})",
            f"TEMPORAL_TLS = {tls}", f"TEMPORAL_API_KEY = {'***' if connection.profile.api_key else 'unset'}"]


async def show(args: argparse.Namespace, settings: Settings) -> int:
    print(settings.masked("\n".join([*temporal_lines(settings), *lines(settings)])))
    return 0
