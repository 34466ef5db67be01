"""Text and JSON values nobody vetted (request bodies, model replies, pages), made safe to carry.

Pure and linear in the value's size, so workflow code, the activities and the API server share one
reading of each rule:

- JSON's ``"\\ud800"`` escape decodes to a lone surrogate, a ``str`` that UTF-8 (so every payload,
  log line and response) refuses to encode: a value holding one fails whatever carries it next, a
  workflow task or an activity's result. Each becomes U+FFFD, the replacement character.
- A parser that recurses per level of nesting (``json.loads``, pydantic's serializer, ``repr``)
  fails on a deep enough value, so a parsed value is measured, level by level and never
  recursing, before anything walks it.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
# A high surrogate no low one follows, or a low one no high one precedes (one character each side).
_LONE = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")


def encodes_as_utf8(text: str) -> bool:
    """Whether UTF-8 can carry ``text``: it holds no lone surrogate (what JSON's ``"\\ud800"`` and a
    name or variable of bytes that are not UTF-8 become in Python)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def without_lone_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (a pair written as two escapes is the
    character it stands for, as in UTF-16); ``text`` itself when it has none. By substitution, not by
    decoding UTF-16 with "replace", whose error handler costs a microsecond a surrogate (1 s per MB)."""
    if encodes_as_utf8(text):
        return text
    paired = _LONE.sub(REPLACEMENT, text)  # what is left are pairs: each the character it stands for
    return paired.encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def scrubbed(value: Any) -> Any:
    """A parsed JSON value with :func:`without_lone_surrogates` applied to every string and key.
    Recursive: measure the value with :func:`nested_deeper` first."""
    if isinstance(value, str):
        return without_lone_surrogates(value)
    if isinstance(value, list):
        return [scrubbed(item) for item in value]
    if isinstance(value, dict):
        return {without_lone_surrogates(key): scrubbed(item) for key, item in value.items()}
    return value


def nested_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` has arrays or objects nested more than ``limit`` deep, found level by level
    (never recursing, so the check cannot hit the recursion limit it guards against)."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, dict | list)]
        if not level:
            return False
    return True
