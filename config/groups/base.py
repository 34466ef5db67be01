"""What every settings group shares: the model configuration and the comma-separated env lists."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict


class SettingsGroup(BaseModel):
    """A group of settings; fields are named by their env vars (the alias), or by name in tests.

    Each field's docstring (the string after it) is its description, written once beside the field: the
    configuration reference (docs/configuration/reference.md) is generated from it by ``python -m
    config.reference``, which reads it from the source. Not pydantic's ``use_attribute_docstrings``: that
    reads the source at import, about 0.2 s of every process's start.

    Validators are built when first used (``defer_build``): only the composed ``Settings`` validates, so
    the groups' own ten validators were built for nothing at every process's start (issue #45)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, defer_build=True)


def comma_separated(value: Any, clean: Callable[[str], str] = lambda item: item) -> Any:
    """An env value's comma-separated items, stripped, blanks dropped and each ``clean``ed;
    a value that is already a list (conf.yaml, a test) passes through."""
    if not isinstance(value, str):
        return value
    return [clean(item.strip()) for item in value.split(",") if item.strip()]
