r"""Markdown links (``[label](target)``) in text nobody vetted, found in one left-to-right pass.

The patterns this replaces (``\[[^\]]*\]\([^)]+\)`` and kin) start again at every "[" and scan to
the next "]" and ")" each time: a report of 120,000 "[" held a worker for minutes. A link's label
ends at the first "]" after its "[", so a link can only end its label at a "](": each of those is
tried once, from the first opener after the "]" before it (where such a pattern's own match would
start), and every other search starts where the previous one ended or beyond. A pass costs O(n)
whatever the text holds, and finds exactly the links ``re.finditer`` finds with such a pattern.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

# What a link's target may be: anything up to ")" ("any": ``[^)]*\)``, "nonempty": ``[^)]+\)``), or an
# http(s) URL with no blank in it ("web": ``https?://[^\s)]+\)``).
Target = Literal["any", "nonempty", "web"]
_URL_STOP = re.compile(r"[\s)]")  # one character class: one linear scan


class _Ahead:
    """``find(start)`` (the first hit at or after ``start``, or -1) for starts that rise: the last
    answer is reused while it lies at or after ``start``, so a pass does O(n) work in all."""

    def __init__(self, find: Callable[[int], int]) -> None:
        self._find = find
        self._since = -1
        self._found = -1

    def at(self, start: int) -> int:
        if not (0 <= self._since <= start and (self._found == -1 or start <= self._found)):
            self._since, self._found = start, self._find(start)
        return self._found


@dataclass(frozen=True)
class Link:
    start: int  # the opener's first character ("[", or the "!" of "![")
    label_end: int  # the "]"
    end: int  # just after the ")"


def links(text: str, opener: str, target: Target) -> Iterator[Link]:
    r"""The links ``re.finditer`` finds with ``re.escape(opener)`` + ``[^\]]*\]\(`` + the target's
    pattern (``opener`` ends with "["), left to right."""
    paren = _Ahead(lambda start: text.find(")", start))
    url_stop = _Ahead(lambda start: match.start() if (match := _URL_STOP.search(text, start)) else -1)

    def target_end(start: int) -> int:
        """Just after the ")" closing a target that starts at ``start``; -1: none there."""
        if target == "web":  # ``https?://[^\s)]+\)``
            first = start + (8 if text.startswith("https://", start) else 7)
            stop = url_stop.at(first) if text.startswith(("http://", "https://"), start) else -1
            return stop + 1 if stop > first and text[stop] == ")" else -1
        close = paren.at(start)
        return close + 1 if close >= 0 and (target == "any" or close > start) else -1

    # A web link's label ends at a "](http": the other "](" cannot end one, and no label spans a "]".
    label_close = "](http" if target == "web" else "]("
    position = 0
    while (label_end := text.find(label_close, position)) >= 0:
        after_bracket = text.rfind("]", position, label_end) + 1 or position
        start = text.find(opener, after_bracket, label_end)
        end = target_end(label_end + 2) if start >= 0 else -1
        if end >= 0:
            yield Link(start, label_end, end)
        position = end if end >= 0 else label_end + 1
