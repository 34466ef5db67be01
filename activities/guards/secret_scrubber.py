"""Remove every configured secret value from text before it leaves an activity.

Why: activity results and failures go into workflow history, the model's context, logs and the
blob store, and the text in them comes from places the worker does not control: a provider's
error echoing the request, a page, an MCP server that prints its environment. Instead of trusting
each of those, the worker knows its secrets and replaces them wherever they appear
(``hosting/scrub_interceptor.py`` applies this to everything an activity returns or raises).

What counts as a secret: every ``Settings`` field named like a key, token, secret or password;
every worker variable named like one (or listed in ``DEERFLOW_SECRET_ENV_NAMES``); and, for each
operator MCP server, its header values, the values its ``${VAR}`` placeholders stand for, and env
values named like a secret. Values shorter than ``MIN_SECRET_CHARS`` are ignored: replacing
placeholders such as ``offline`` everywhere would mangle ordinary text and protect nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from config.mcp_servers import placeholder_values
from config.secrets import MIN_SECRET_CHARS
from config.settings import Settings
from workflows.text.untrusted_text import without_lone_surrogates

REDACTED = "[redacted]"
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)


class SecretScrubber:
    """Replaces known secret values (longest first, so a value containing another goes whole)."""

    @classmethod
    def for_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> SecretScrubber:
        """The scrubber for a worker built with ``settings`` and running in ``environ`` (default: the
        variables the settings were loaded from, ``.env``'s included)."""
        return cls(secret_values(settings, settings.variables() if environ is None else environ))

    def __init__(self, secrets: Iterable[str]) -> None:
        values = sorted({value for value in secrets if len(value) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None
        # Text streamed piece by piece is checked with this much overlap (activities/model/token_stream.py).
        self.longest = len(values[0]) if values else 0

    def scrub(self, text: str) -> str:
        """``text`` without the secrets, and with each lone surrogate U+FFFD: what it returns goes into
        payloads and log lines, which are UTF-8 (a lone surrogate failed them, or a log line came out
        with its escape)."""
        return without_lone_surrogates(self._pattern.sub(REDACTED, text) if self._pattern else text)

    def scrub_value(self, value: Any) -> Any:
        """``value`` with every string inside it (dicts, lists, tuples, pydantic models) scrubbed.

        A model is only rebuilt when something in it changed, so the common case costs one pass.
        """
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, BaseModel):
            dumped = value.model_dump(mode="python")
            scrubbed = self.scrub_value(dumped)
            return value if scrubbed == dumped else type(value).model_validate(scrubbed)
        if isinstance(value, dict):
            return {key: self.scrub_value(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.scrub_value(item) for item in value)
        return value


def secret_values(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """Every secret value this worker is configured with (see the module docstring)."""
    values = [
        value
        for name, value in settings.model_dump().items()
        if isinstance(value, str) and SECRET_NAME.search(name)
    ]
    names = set(settings.secret_env_names)
    values += [value for name, value in environ.items() if name in names or SECRET_NAME.search(name)]
    for server in settings.mcp_servers.values():
        values += server.headers.values()
        values += placeholder_values(server.headers, environ) + placeholder_values(server.env, environ)
        values += [value for name, value in server.env.items() if SECRET_NAME.search(name)]
    return values


class ScrubbingLogFilter(logging.Filter):
    """A handler filter for the worker's logs: the same scrubbing for log records.

    Activities' own output is already clean (the interceptor); this covers what libraries log on
    their own, such as an HTTP client logging a URL that carries a key in its query string.
    """

    def __init__(self, scrubber: SecretScrubber) -> None:
        super().__init__()
        self.scrubber = scrubber

    def filter(self, record: logging.LogRecord) -> bool:
        scrubber = self.scrubber
        record.msg, record.args = scrubber.scrub(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrubber.scrub(record.exc_text)
        return True
