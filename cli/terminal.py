"""Makes model-written text safe to print on a terminal (security issue #8, item 10).

Why: reports, plans, findings, questions and errors are written by a model (or come from pages
it read), and a terminal obeys control sequences in what it prints: ESC[2J clears the screen,
OSC 0 sets the window title, OSC 52 writes the clipboard, OSC 8 makes links, BEL rings.
:func:`printable` removes them before anything reaches the screen; files written with ``-o``
keep the text as it is. Bidi overrides are removed too: they make printed text read differently
from what it is ("Trojan Source").

``rich`` markup (``[bold red]``, ``[link=…]``) is a second interpreter: wherever model text
reaches rich (cli/watch.py), it goes in as a ``Text`` object, which rich never parses as markup.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import BaseModel

from workflows.text.untrusted_text import without_lone_surrogates

_SEQUENCES = re.compile(
    r"""
      (?:\x1b\[|\x9b) [\x30-\x3f]* [\x20-\x2f]* [\x40-\x7e]          # CSI: cursor, erase, colours
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]) [^\x07\x1b\x9c\x90\x98\x9d\x9e\x9f]* (?:\x07|\x1b\\|\x9c)
                                          # OSC, DCS, SOS, PM, APC to BEL or ST (linear: stops at any opener)
    | \x1b [\x20-\x2f]* [\x30-\x7e]                                    # other ESC sequences
    | [\x00-\x08\x0b-\x1f\x7f-\x9f]                                    # C0 (but \t, \n), DEL, C1, lone ESC
    | [\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]                   # bidi marks, embeddings, overrides
    """,
    re.VERBOSE,
)
# What JSON leaves unescaped but a terminal may still act on (JSON already escapes C0).
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")

Model = TypeVar("Model", bound=BaseModel)


def printable(text: str) -> str:
    """``text`` without terminal control sequences and control characters (``\\n`` and ``\\t`` stay), and
    with each lone surrogate U+FFFD (which a terminal's UTF-8 cannot carry)."""
    return without_lone_surrogates(_SEQUENCES.sub("", text))


def printable_json(text: str) -> str:
    """JSON text with the characters a terminal could act on written as ``\\uXXXX``: the same JSON value.

    They can only occur inside strings (JSON syntax is ASCII), where the escape means the same.
    """
    return without_lone_surrogates(_JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text))


def printable_model(model: Model) -> Model:
    """A copy of ``model`` with :func:`printable` applied to every string in it."""
    return type(model).model_validate(_clean(model.model_dump()))


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item) for item in value]
    return value
