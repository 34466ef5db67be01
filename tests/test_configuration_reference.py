"""The configuration reference is generated from the settings groups (config/groups/), so it cannot drift
(issue #47): every setting is in one group and has a description (its docstring), the page is what
``python -m config.reference --write`` writes today, and no page of the docs (nor the README or
ARCHITECTURE.md) names a setting that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import config.groups
from config.groups.base import SettingsGroup
from config.reference import CONF_KEYS, GROUPS, PAGE, field_docstrings, render
from config.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {field.alias for field in Settings.model_fields.values()}
# An env-style name in a code span: upper-case words joined by underscores, each starting with a letter
# (not `Q4_1`), not part of a longer word, path, `$VAR`, `${VAR}` or `[EDIT_PLAN]`.
NAME = re.compile(r"(?<![\w.$/{\[-])([A-Z][A-Z0-9]*(?:_[A-Z][A-Z0-9]*)+)(?![\w\]])")
# Other programs' variables, which their own libraries read: Temporal's (envconfig, its Web UI),
# OpenTelemetry's and the AWS credential chain's.
OTHERS_PREFIXES = ("TEMPORAL_", "OTEL_", "AWS_")


def names_elsewhere() -> set[str]:
    """Names the docs may use that are not settings, each found in the code that reads it: DeerFlow's keys
    that config/deerflow.py and config/settings.py honour, pass through or refuse, and the variables of the
    compose file, the image, the Makefile and the benches."""
    sources = [ROOT / "config" / "deerflow.py", ROOT / "config" / "settings.py", ROOT / "docker-compose.yml",
               ROOT / "Dockerfile", ROOT / "Makefile", *sorted((ROOT / "bench").glob("*.py"))]
    return {name for source in sources for name in re.findall(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+",
                                                              source.read_text(encoding="utf-8"))}


# A name is taken for a setting when its first word starts a setting's (DEERFLOW_, LLM_, SEARCH_, …): other
# upper-case words in code spans (a visibility query's STARTS_WITH, DeerFlow's ENABLE_ keys) are not ours.
SETTING_FAMILIES = {name.split("_")[0] for name in SETTINGS}


def unknown_settings(text: str, known: set[str]) -> set[str]:
    """The setting-like names in ``text``'s code spans that are neither a setting nor known elsewhere."""
    names = {name for span in re.findall(r"`([^`\n]+)`", text) for name in NAME.findall(span)}
    return {name for name in names if name.split("_")[0] in SETTING_FAMILIES
            and name not in known and not name.startswith(OTHERS_PREFIXES)}


def test_every_setting_is_in_one_group_on_the_page() -> None:
    grouped = [field.alias for group in GROUPS.values() for field in group.model_fields.values()]
    assert sorted(grouped) == sorted(SETTINGS), "each setting in exactly one group of config.reference.GROUPS"
    declared = {cls for cls in SettingsGroup.__subclasses__() if cls.__module__.startswith(config.groups.__name__)}
    assert declared == set(GROUPS.values()), "every group of config/groups/ has its table"
    assert set(CONF_KEYS) <= SETTINGS, "the conf.yaml keys set settings that exist"


@pytest.mark.parametrize("title", GROUPS)
def test_every_setting_has_a_description(title: str) -> None:
    group = GROUPS[title]
    described = field_docstrings(group)
    missing = [field.alias for name, field in group.model_fields.items() if not described.get(name)]
    assert not missing, f"give these fields a docstring (the string after the field) in {group.__module__}"


def test_the_reference_page_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/configuration/reference.md is stale: run `.venv/bin/python -m config.reference --write`")


def test_a_field_without_a_docstring_has_no_description() -> None:
    class Described(SettingsGroup):
        with_doc: int = 1
        """Counts things."""
        # A comment is not a description.
        without_doc: int = 2

    assert field_docstrings(Described) == {"with_doc": "Counts things."}


def test_the_docs_name_no_setting_that_does_not_exist() -> None:
    known = SETTINGS | names_elsewhere()
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md", ROOT / "ARCHITECTURE.md"]
    unknown = {str(page.relative_to(ROOT)): found for page in pages
               if (found := unknown_settings(page.read_text(encoding="utf-8"), known))}
    assert not unknown, unknown
    planted = ("Set `DEERFLOW_RUN_TOKEN_BUDGET`, `DEERFLOW_NO_SUCH_SETTING=3` and `LLM_MAX_TOKENS`; `TEMPORAL_ADDRESS`,"
               " `[EDIT_PLAN]`, `--query \"WorkflowId STARTS_WITH 'page-'\"`.")
    assert unknown_settings(planted, known) == {"DEERFLOW_NO_SUCH_SETTING", "LLM_MAX_TOKENS"}
