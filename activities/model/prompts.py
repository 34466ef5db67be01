"""Renders the markdown prompt templates under ``prompts/``.

Rendering happens inside the ``chat`` activity, so only the template's name and its few variables
enter workflow history, never the long prompt text, and a template can be edited without touching
workflow code.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from temporalio.exceptions import ApplicationError

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "prompts"
_PLACEHOLDER = re.compile(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)\s*}}")


@lru_cache(maxsize=64)
def _template(name: str) -> str:
    if not re.fullmatch(r"[a-z_]+(/[a-z_]+)?", name):
        raise ApplicationError(f"Invalid prompt name {name!r}", type="PromptError", non_retryable=True)
    path = PROMPTS_DIR / f"{name}.md"
    if not path.is_file():
        raise ApplicationError(f"No prompt template {path}", type="PromptError", non_retryable=True)
    return path.read_text(encoding="utf-8")


def render_prompt(name: str, variables: dict[str, str]) -> str:
    """Fill ``{{ var }}`` placeholders; a missing variable is a bug, so it fails loudly."""
    values = dict(variables)
    style = values.get("report_style")
    if style is not None and "style_guidance" not in values:
        values["style_guidance"] = _template(f"styles/{style}").strip()

    def substitute(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise ApplicationError(
                f"Prompt {name!r} needs variable {key!r}", type="PromptError", non_retryable=True
            )
        return values[key]

    return _PLACEHOLDER.sub(substitute, _template(name))
