"""JSON a model meant to write, mended by json-repair where that takes bounded time (issue #42 §1).

json-repair mends what models get wrong (fences, trailing commas, single quotes, a reply cut at its
cap), but it is pure Python and its cost grows with nesting: "{" × 100,000 took it 13 s, "(" ×
100,000 8 s, and ``{"a": "`` followed by "{a:1," × 10,000 5 s, growing as the square. Measured on
text nested at most a few dozen levels it stays under 20 µs a character. So a reply is read
strictly first (``json.loads``: C, linear); only one that is not JSON, at most ``MAX_REPAIR_CHARS``
long and with brackets nested at most ``MAX_REPAIR_DEPTH`` deep (counted in one pass, inside strings
too, so the count is never less than json-repair's), is mended. Callers run this in a thread: the
mending may take a good part of a second, which the worker's event loop must not wait for.
"""

from __future__ import annotations

import json
from typing import Any

import json_repair

# Far beyond what a planner's or an action's output cap lets through.
MAX_REPAIR_CHARS = 64_000
MAX_REPAIR_DEPTH = 32
_OPENING, _CLOSING = "([{", ")]}"


class Unrepairable(ValueError):
    """The text is not JSON, and not JSON json-repair may mend; the message says why."""


def brackets_deeper(text: str, limit: int) -> bool:
    """Whether ``text``'s brackets (any kind, strings included) nest more than ``limit`` deep."""
    depth = 0
    for char in text:
        if char in _OPENING:
            depth += 1
            if depth > limit:
                return True
        elif char in _CLOSING and depth:
            depth -= 1
    return False


def lenient_json(text: str) -> Any:
    """``text`` as JSON, mended if need be; ``Unrepairable`` when it cannot be, or not in bounded time."""
    try:
        return json.loads(text)
    except RecursionError:
        raise Unrepairable(f"the JSON is nested deeper than {MAX_REPAIR_DEPTH} levels") from None
    except ValueError:
        pass
    if len(text) > MAX_REPAIR_CHARS:
        raise Unrepairable(f"not JSON, and too long to mend ({len(text):,} characters; at most "
                           f"{MAX_REPAIR_CHARS:,})")
    if brackets_deeper(text, MAX_REPAIR_DEPTH):
        raise Unrepairable(f"not JSON, and nested too deep to mend (more than {MAX_REPAIR_DEPTH} levels)")
    try:
        return json_repair.loads(text, skip_json_loads=True)
    except Exception as error:  # json-repair raises various types on hopeless input
        raise Unrepairable(f"not JSON ({error})") from None
