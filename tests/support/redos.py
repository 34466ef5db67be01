r"""A ReDoS check for Python regular expressions: the backtracking shapes that cost quadratic time.

regexploit (run beside this by tests/test_redos.py) finds nested and overlapping repeats that cost
cubic time and worse within one match attempt, but none of the quadratic patterns this project had
(issue #42 §1). Two shapes cover those, read from the pattern's parse tree (``re._parser``), each
alternative of a branch on its own path, groups opened:

* **overlap**: two unbounded repeats with only optional items between them, matching a common
  character, and something after them that can fail: every split of a run of that character
  between them is tried (``\s*(.*?)```` on blanks after a lone fence; ``(.+?)[ \t#]*$``).
* **restart**: an unanchored pattern (``search``, ``findall``, ``sub``) with an unbounded repeat that
  can run over a character a match can start with, and something after it that can fail: a failed
  attempt scans the run, and so does the attempt from each later start inside it (``<mark\b[^>]*>``
  on "<mark " × 60,000; ``\[[^\]]*\]\(`` on "[" × 120,000). A MULTILINE ``^`` starts at every line,
  so there the repeat counts when it can cross a line break.

Possessive repeats and atomic groups are not backtracked into (no overlap), but an attempt still
restarts. The check is conservative: a flagged pattern may be linear for a reason it cannot see
(a zero-width ``\b`` no later start passes; an alternative that always matches); tests/test_redos.py
lists each of those with its reason.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from re import _constants as c  # type: ignore[attr-defined]
from re import _parser as sre  # type: ignore[attr-defined]
from typing import Any

# The characters a set is tried on, besides the pattern's own (its literals and range ends): ASCII,
# Latin-1, and one of each kind of character a pattern might single out.
BASE_UNIVERSE = frozenset(chr(code) for code in [*range(0x250), 0x2028, 0x2029, 0x3000, 0x3002, 0x4E00, 0x6280,
                                                 0x9FFF, 0xAC00, 0xFF1A, 0xFFFD, 0x1F600])
SINGLE = (c.LITERAL, c.NOT_LITERAL, c.ANY, c.IN)
REPEATS = (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT)
MAX_PATHS = 256  # alternatives multiply; past this many paths the rest are not expanded
Item = tuple[Any, Any]


@dataclass(frozen=True)
class Finding:
    shape: str  # "overlap" or "restart"
    detail: str


@dataclass(frozen=True)
class _Step:
    """One item on a path: a single character, an anchor, or a repeat (its body analysed as a whole)."""

    item: Item
    atomic: bool  # inside an atomic group: never backtracked into

    @property
    def unbounded(self) -> bool:
        return self.item[0] in REPEATS and self.item[1][1] == c.MAXREPEAT

    @property
    def backtracks(self) -> bool:
        return self.unbounded and self.item[0] is not c.POSSESSIVE_REPEAT and not self.atomic


def _category(name: Any, char: str, ascii_only: bool) -> bool:
    checks: dict[Any, Callable[[str], bool]] = {
        c.CATEGORY_DIGIT: lambda ch: ch.isdecimal(),
        c.CATEGORY_SPACE: lambda ch: ch.isspace(),
        c.CATEGORY_WORD: lambda ch: ch.isalnum() or ch == "_",
        c.CATEGORY_LINEBREAK: lambda ch: ch == "\n",
    }
    negated = {c.CATEGORY_NOT_DIGIT: c.CATEGORY_DIGIT, c.CATEGORY_NOT_SPACE: c.CATEGORY_SPACE,
               c.CATEGORY_NOT_WORD: c.CATEGORY_WORD, c.CATEGORY_NOT_LINEBREAK: c.CATEGORY_LINEBREAK}
    base = negated.get(name, name)
    hit = checks[base](char) and (not ascii_only or char.isascii())
    return hit != (name in negated)


class Analyzer:
    """One pattern's parse tree, and what its items can match."""

    def __init__(self, pattern: str | bytes, flags: int = 0, anchored_call: bool = False) -> None:
        """``anchored_call``: the pattern is only ever used with ``match``/``fullmatch`` (one attempt)."""
        self.tree = sre.parse(pattern, flags)
        self.flags = self.tree.state.flags
        self.ascii = bool(self.flags & re.ASCII) or isinstance(pattern, bytes)
        self.anchored_call = anchored_call
        own = {chr(code + delta) for code in _codes(self.tree) for delta in (-1, 0, 1) if 0 <= code + delta < 0x110000}
        self.universe = sorted(BASE_UNIVERSE | own)
        self._chars: dict[int, frozenset[str]] = {}
        self._singles: dict[tuple[Any, Any], frozenset[str]] = {}

    def _matches(self, op: Any, av: Any, char: str) -> bool:
        variants = {char, char.lower(), char.upper()} if self.flags & re.IGNORECASE else {char}
        if op is c.ANY:
            return char != "\n" or bool(self.flags & re.DOTALL)
        if op is c.LITERAL:
            return any(ord(ch) == av for ch in variants if len(ch) == 1)
        if op is c.NOT_LITERAL:
            return all(ord(ch) != av for ch in variants if len(ch) == 1)
        negate = bool(av) and av[0][0] is c.NEGATE
        members = av[1:] if negate else av
        hit = any(self._member(member, ch) for ch in variants if len(ch) == 1 for member in members)
        return hit != negate

    def _member(self, member: Item, char: str) -> bool:
        op, av = member
        if op is c.LITERAL:
            return ord(char) == av
        if op is c.RANGE:
            return av[0] <= ord(char) <= av[1]
        if op is c.CATEGORY:
            return _category(av, char, self.ascii)
        return op is c.NOT_LITERAL and ord(char) != av

    def chars(self, items: Any) -> frozenset[str]:
        """Every character ``items`` can consume, anywhere in them."""
        if id(items) not in self._chars:
            found: set[str] = set()
            for op, av in items:
                if op in SINGLE:
                    found |= self._single(op, av)
                else:
                    for child in _children(op, av):
                        found |= self.chars(child)
            self._chars[id(items)] = frozenset(found)
        return self._chars[id(items)]

    def _single(self, op: Any, av: Any) -> frozenset[str]:
        key = (op, id(av) if op is c.IN else av)
        if key not in self._singles:
            self._singles[key] = frozenset(ch for ch in self.universe if self._matches(op, av, ch))
        return self._singles[key]

    def first(self, items: Any) -> frozenset[str]:
        """The characters a match of ``items`` can start with (zero-width items passed over)."""
        found: set[str] = set()
        for op, av in items:
            if op in SINGLE:
                return frozenset(found | self._single(op, av))
            for child in _children(op, av):
                found |= self.first(child)
            if not self.nullable([(op, av)]):
                break
        return frozenset(found)

    def nullable(self, items: Any) -> bool:
        """Whether ``items`` can match the empty string."""
        for op, av in items:
            if op in SINGLE or op is c.GROUPREF:
                return False
            if op in REPEATS and av[0] > 0 and not self.nullable(av[2]):
                return False
            if op is c.BRANCH and not any(self.nullable(branch) for branch in av[1]):
                return False
            if op in (c.SUBPATTERN, c.ATOMIC_GROUP) and not self.nullable(av[-1] if op is c.SUBPATTERN else av):
                return False
        return True

    def can_fail(self, steps: list[_Step]) -> bool:
        """Whether what ``steps`` match can fail to match (an anchor, a character, a repeat of at least one)."""
        return any(step.item[0] in (*SINGLE, c.AT, c.GROUPREF, c.ASSERT, c.ASSERT_NOT)
                   or (step.item[0] in REPEATS and not self.nullable([step.item])) for step in steps)

    def findings(self) -> list[Finding]:
        found: list[Finding] = []
        for path in itertools.islice(_paths(list(self.tree), atomic=False), MAX_PATHS):
            found += self._overlaps(path) + self._restarts(path)
            for step in path:  # a repeat's body is a pattern of its own, tried at each repetition
                if step.item[0] in REPEATS:
                    found += [f for body in _paths(list(step.item[1][2]), step.atomic) for f in self._overlaps(body)]
        return list(dict.fromkeys(found))

    def _overlaps(self, path: list[_Step]) -> list[Finding]:
        found = []
        for index, first in enumerate(path):
            if not first.backtracks:
                continue
            for later, second in enumerate(path[index + 1:], start=index + 1):
                if second.unbounded and self.can_fail(path[later + 1:]):
                    common = self.chars(first.item[1][2]) & self.chars(second.item[1][2])
                    if common:
                        found.append(Finding("overlap", f"{_show(first)} then {_show(second)} on {_sample(common)}"))
                if not self.nullable([second.item]):
                    break
        return found

    def _restarts(self, path: list[_Step]) -> list[Finding]:
        if self.anchored_call:
            return []
        head = path[0].item if path else (None, None)
        anchored = head[0] is c.AT and head[1] in (c.AT_BEGINNING, c.AT_BEGINNING_STRING)
        multiline = anchored and head[1] is c.AT_BEGINNING and bool(self.flags & re.MULTILINE)
        if anchored and not multiline:
            return []
        starts = frozenset("\n") if multiline else self.first(self.tree)
        return [Finding("restart", f"{_show(step)} runs over a start ({_sample(over)})")
                for index, step in enumerate(path)
                if step.unbounded and self.can_fail(path[index + 1:])
                and (over := self.chars(step.item[1][2]) & starts)]


def _codes(items: Any) -> Iterator[int]:
    """The code points a pattern names (literals, range ends), at any depth."""
    for op, av in items:
        if op in (c.LITERAL, c.NOT_LITERAL):
            yield av
        elif op is c.IN:
            for member_op, member_av in av:
                if member_op in (c.LITERAL, c.NOT_LITERAL):
                    yield member_av
                elif member_op is c.RANGE:
                    yield from member_av
        for child in _children(op, av):
            yield from _codes(child)


def _children(op: Any, av: Any) -> Iterator[Any]:
    if op in REPEATS:
        yield av[2]
    elif op is c.BRANCH:
        yield from av[1]
    elif op is c.SUBPATTERN:
        yield av[-1]
    elif op is c.ATOMIC_GROUP:
        yield av


def _paths(items: list[Item], atomic: bool) -> Iterator[list[_Step]]:
    """Each way through ``items``: one alternative of every branch, groups opened."""
    if not items:
        yield []
        return
    (op, av), rest = items[0], items[1:]
    if op is c.SUBPATTERN:
        heads: Iterator[list[_Step]] = _paths(list(av[-1]), atomic)
    elif op is c.ATOMIC_GROUP:
        heads = _paths(list(av), True)
    elif op is c.BRANCH:
        heads = (path for branch in av[1] for path in _paths(list(branch), atomic))
    else:
        heads = iter([[_Step((op, av), atomic)]])
    for head in itertools.islice(heads, MAX_PATHS):
        for tail in itertools.islice(_paths(rest, atomic), MAX_PATHS):
            yield head + tail


def _show(step: _Step) -> str:
    op, av = step.item
    lazy = {c.MAX_REPEAT: "", c.MIN_REPEAT: "?", c.POSSESSIVE_REPEAT: "+"}[op]
    body = ",".join(str(child_op).lower() for child_op, _ in list(av[2])[:2])
    return f"({body}){{{av[0]},}}{lazy}"


def _sample(chars: frozenset[str]) -> str:
    return repr("".join(sorted(chars)[:6]))


def findings(pattern: str | bytes, flags: int = 0, anchored_call: bool = False) -> list[Finding]:
    """The quadratic shapes in ``pattern`` (empty: neither is there); ``anchored_call``: see ``Analyzer``."""
    return Analyzer(pattern, flags, anchored_call).findings()
