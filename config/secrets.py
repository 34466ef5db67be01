"""Which values of a configuration are secrets, so that no message, log or page about it shows one.

A setting named like a credential (:func:`is_secret`) is never shown. But a secret can also reach a
setting that is not one: ``model: $OPENAI_API_KEY`` in conf.yaml, ``LOG_LEVEL=${OPENAI_API_KEY}``
in ``.env``, a key pasted on the wrong line. Its refusal then printed it whole
(``Error: LOG_LEVEL='sk-…'``), from ``starter.py`` and from the worker into its log, and a key used
as the model name was shown by ``starter.py config`` and ``GET /api/config`` (which viewers read).

So the secrets are known by value: every variable (the environment, ``.env``) named like a
credential or listed in ``DEERFLOW_SECRET_ENV_NAMES``, and every string held under a credential's
name in any setting (conf.yaml's ``api_key``, a named token's ``token``, an MCP server's headers).
A setting whose given value holds one is masked as a whole wherever the configuration is shown,
and every line about the configuration has them masked. Matching ignores case, as validators
upper- or lower-case what they are given (LOG_LEVEL, host names) before they refuse it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

MASK = "***"
# Shorter values (placeholders such as "offline") would mask ordinary words and protect nothing.
MIN_SECRET_CHARS = 8
# The last word of a credential's name. A word anywhere else says what is counted or configured, not
# that the value is secret: TOKEN_LIMIT, DEERFLOW_RUN_TOKEN_BUDGET, DEERFLOW_TOKEN_STREAM_URL, and a
# KEY_FILE is a path. Masking those would hide from ``starter.py config`` what an operator checks.
_SECRET_LAST_WORDS = frozenset({"KEY", "KEYS", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"})
_SECRET_NAMES = frozenset({"DEERFLOW_WEB_TOKENS"})  # named API tokens; other names ending in TOKENS count
# The parts of a secret table that say who holds what, not the credential: a named token's name and role
# are shown (``starter.py config``, a refused ``role: boss``); its token never is.
_PUBLIC_FIELDS = {"DEERFLOW_WEB_TOKENS": frozenset({"NAME", "ROLE"})}
_HEADERS = "headers"  # an MCP server's HTTP headers: every value is a credential (Authorization, X-Api-Key…)


def is_secret(name: str) -> bool:
    """Whether the setting ``name`` (or a part of it: ``DEERFLOW_WEB_TOKENS.0.token``) holds a
    credential, never printed."""
    parts = name.upper().split(".")
    if len(parts) == 3 and parts[1].isdigit() and parts[2] in _PUBLIC_FIELDS.get(parts[0], ()):
        return False
    return any(part.rsplit("_", 1)[-1] in _SECRET_LAST_WORDS or part in _SECRET_NAMES for part in parts)


class Secrets:
    """The secret values of one configuration, to find and mask them in text about it."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        kept = sorted({value for value in values if len(value) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        self._lowered = [value.lower() for value in kept]
        # Longest first, so a secret that contains another is masked whole; literals only: linear.
        self._patterns = [re.compile(re.escape(value), re.IGNORECASE) for value in kept]

    def holds(self, value: Any) -> bool:
        """Whether a secret is in any string inside ``value`` (a string, or lists and mappings of them)."""
        return any(secret in text.lower() for text in _strings(value) for secret in self._lowered)

    def mask(self, text: str) -> str:
        for pattern in self._patterns:
            text = pattern.sub(MASK, text)
        return text


def known_secrets(variables: Mapping[str, str], values: Mapping[str, Any]) -> Secrets:
    """The secrets in ``variables`` (by name) and in the settings ``values`` (by env name, as given:
    a credential's value, and in tables the strings under a credential's key or in ``headers``)."""
    listed = {name.strip() for name in variables.get("DEERFLOW_SECRET_ENV_NAMES", "").split(",")}
    found = [value for name, value in variables.items() if is_secret(name) or name in listed]
    # Inside a table (DEERFLOW_WEB_TOKENS' entries), by key: a token is secret, its holder's name is not.
    found += [text for name, value in variables.items() if is_secret(name) for text in _strings(_json(value), False)]
    found += [text for name, value in values.items()
              for text in _strings(value, is_secret(name) and isinstance(value, str))]
    return Secrets(found)


def _json(value: str) -> Any:
    """A secret variable's JSON (DEERFLOW_WEB_TOKENS' list), to find the secrets inside it."""
    if not value.lstrip().startswith(("[", "{")):
        return None
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None


def _strings(value: Any, secret: bool = True) -> Iterator[str]:
    """The strings inside ``value`` (its own, if it is one); with ``secret`` False, only those held
    under a credential's name or in headers. Walked without recursion (conf.yaml's depth is bounded,
    the walk need not be)."""
    pending: list[tuple[Any, bool]] = [(value, secret)]
    while pending:
        item, under_secret = pending.pop()
        if isinstance(item, str):
            if under_secret:
                yield item
        elif isinstance(item, Mapping):
            pending += [(child, under_secret or is_secret(str(key)) or str(key).lower() == _HEADERS)
                        for key, child in item.items()]
        elif isinstance(item, list | tuple):
            pending += [(child, under_secret) for child in item]
