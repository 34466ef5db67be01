"""Worker settings for a test that needs other settings than the session's worker has."""

from __future__ import annotations

from config.settings import Settings, load_settings


def settings_with(provider_env: dict[str, str], **overrides: str) -> Settings:
    """The fakes' settings plus ``overrides`` (by env name), read as the worker would read them."""
    return load_settings(environ={**provider_env, **overrides})
