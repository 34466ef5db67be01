"""``starter.py config``: the effective configuration, where each value came from, secrets masked.

The settings were already checked by ``starter.py`` before any command ran (a problem is one line and
exit code 2), so reaching this command means they are valid: it prints them and exits 0.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from config.settings import Settings, is_secret


def lines(settings: Settings) -> list[str]:
    """One ``NAME = value  (source)`` line per setting, in the settings' order."""
    sources = settings.sources()
    out = []
    for name, field in Settings.model_fields.items():
        env_name = field.alias or name.upper()
        value: Any = getattr(settings, name)
        if value is not None and (is_secret(env_name) or env_name == "MCP_SERVERS"):
            # MCP server tables carry their own env and headers (tokens): only their names are shown.
            shown = f"[{', '.join(value)}]" if env_name == "MCP_SERVERS" else "***"
        else:
            dumped = settings.model_dump(mode="json", include={name})[name]
            shown = dumped if isinstance(dumped, str) else json.dumps(dumped)
        out.append(f"{env_name} = {shown}  ({sources.get(env_name, 'default')})")
    return out


async def show(args: argparse.Namespace, settings: Settings) -> int:
    print("\n".join(lines(settings)))
    return 0
