"""The README's configuration tables match the settings groups (config/groups/), so they cannot drift:
every setting is listed once, in its group's table, with the conf.yaml key that sets it and, where the
default is a plain value, that default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic.fields import FieldInfo

from config.deerflow import MODEL_KEYS, OWN_KEYS, SEARCH_ENGINE_KEYS
from config.groups.base import SettingsGroup
from config.groups.crawl import CrawlSettings
from config.groups.mcp import McpSettings
from config.groups.model import ModelSettings
from config.groups.sandbox import SandboxSettings
from config.groups.search import SearchSettings
from config.groups.speech import SpeechSettings
from config.groups.storage import StorageSettings
from config.groups.telemetry import TelemetrySettings
from config.groups.web import WebSettings
from config.groups.worker import WorkerSettings
from config.settings import Settings

README = Path(__file__).resolve().parent.parent / "README.md"
GROUPS: dict[str, type[SettingsGroup]] = {
    "Model": ModelSettings, "Search and documents": SearchSettings, "Crawl": CrawlSettings, "MCP": McpSettings,
    "Worker": WorkerSettings, "Sandbox": SandboxSettings, "Storage": StorageSettings, "Web": WebSettings,
    "Speech": SpeechSettings, "Telemetry": TelemetrySettings,
}
# The conf.yaml key of each setting DeerFlow's conf.yaml (or our own top-level keys) can set.
CONF_KEYS = {
    **{env: f"{block}.{key}" for block, keys in MODEL_KEYS.items() for key, env in keys.items()},
    **{env: f"SEARCH_ENGINE.{key}" for key, env in SEARCH_ENGINE_KEYS.items()},
    **{env: key for key, env in OWN_KEYS.items()},
    "SEARCH_API": "SEARCH_ENGINE.engine",
}


def group_tables() -> dict[str, list[list[str]]]:
    """The rows (cells) of each ``#### Group`` table in the README's Configuration section."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Configuration\n"):text.index("### Coming from DeerFlow\n")]
    tables: dict[str, list[list[str]]] = {}
    for block in section.split("\n#### ")[1:]:
        title, _, body = block.partition("\n")
        rows = [line.strip("|").split(" | ") for line in body.splitlines() if line.startswith("| `")]
        tables[title.strip()] = [[cell.strip() for cell in row] for row in rows]
    return tables


def plain_default(field: FieldInfo) -> str | None:
    """The default as the table shows it, for the defaults that are plain values (else None)."""
    value = field.get_default(call_default_factory=True)
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int | float) or (isinstance(value, str) and value):
        return f"`{value}`"
    return None


def test_every_group_has_a_table_and_every_setting_a_group() -> None:
    assert sorted(group_tables()) == sorted(GROUPS)
    grouped = [field.alias for group in GROUPS.values() for field in group.model_fields.values()]
    assert sorted(grouped) == sorted(field.alias for field in Settings.model_fields.values())


@pytest.mark.parametrize("title", GROUPS)
def test_each_groups_table_lists_its_settings_with_conf_key_and_default(title: str) -> None:
    rows = {row[0].strip("`"): row for row in group_tables()[title]}
    fields = {field.alias: field for field in GROUPS[title].model_fields.values()}
    assert sorted(rows) == sorted(fields), "one row per setting of the group, no other"
    for name, (_, conf, default, meaning) in rows.items():
        expected = CONF_KEYS.get(name)
        assert (re.findall(r"`([^`]+)`", conf)[:1] or [None])[0] == expected, name
        shown = plain_default(fields[name])
        assert shown is None or shown in default, (name, default)
        assert meaning, name
