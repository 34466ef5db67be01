"""Worker settings for a test that needs other settings than the session's worker has."""

from __future__ import annotations

from config.settings import Settings, load_settings


def settings_with(provider_env: dict[str, str], **overrides: str) -> Settings:
    """The fakes' settings plus ``overrides`` (by env name), read as the worker would read them."""
    return load_settings(environ={**provider_env, **overrides})


# How a worker reads a model's reply: whole, or streamed for token previews (to a sink nobody listens
# on, loopback's discard port), as while a page watches the run. The same reply must mean the same.
READINGS: dict[str, dict[str, str]] = {
    "whole": {"DEERFLOW_TOKEN_STREAM": "false"},
    "streamed": {"DEERFLOW_TOKEN_STREAM_URL": "http://127.0.0.1:9/internal/token-stream",
                 "DEERFLOW_TOKEN_STREAM_TOKEN": "t" * 24},
}
