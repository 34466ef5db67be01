"""A visibility query someone typed (``starter.py list/review/cancel --query``, the API's ``query``),
read into a tree and written back in one canonical form, so it can be ANDed with ours and stay inside it.

Why parse instead of pasting it between parentheses: the server's SQL dialect has comments (``-- …``
comments out the rest of the line), two quote characters with doubled-quote escapes and backslash
rules of its own. Pasted, ``x = 'a') OR (y = 'b') --`` closes our parenthesis and comments out the
ownership filter behind it, and a runner that keeps a caller to its own runs would list everyone's.
Written back from the tree, the query is one parenthesised expression made of names, operators
and literals this module quoted itself, whatever was typed: nothing it holds can reach past its
parentheses. What the grammar does not know (comments, ``;``, backticks, backslashes, ``ORDER BY``)
is refused with the position, before any request; the server still checks the names and types.

The grammar is the part of Temporal's list filter a person filters with: comparisons (``=``, ``!=``,
``<>``, ``<``, ``<=``, ``>``, ``>=``), ``[NOT] IN (…)``, ``[NOT] BETWEEN … AND …``, ``IS [NOT] NULL``,
``[NOT] STARTS_WITH``, joined by ``AND``, ``OR``, ``NOT`` and parentheses. Its work is linear in the
text, and the text, its nesting and its comparisons are bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

MAX_QUERY_CHARS = 2_000
MAX_DEPTH = 16
MAX_COMPARISONS = 64

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>'(?:[^'\\]|'')*'|"(?:[^"\\]|"")*")
  | (?P<number>-?\d+(?:\.\d+)?(?![A-Za-z0-9_]))
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<operator><=|>=|!=|<>|=|<|>)
  | (?P<punctuation>[(),])
""", re.VERBOSE)
_KEYWORDS = {"AND", "OR", "NOT", "IN", "BETWEEN", "IS", "NULL", "STARTS_WITH"}


class QueryError(ValueError):
    """A query this module does not take, with the reason and where."""


@dataclass(frozen=True)
class _Token:
    kind: str  # string, number, name, keyword, operator, punctuation, end
    text: str
    at: int


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            shown = text[position:position + 10]
            raise QueryError(f"the query cannot be read at character {position + 1} ({shown!r}): use names, "
                             "quoted values, comparisons, AND, OR, NOT and parentheses")
        kind = match.lastgroup or ""
        if kind != "space":
            word = match.group()
            if kind == "name" and word.upper() in _KEYWORDS:
                kind, word = "keyword", word.upper()
            tokens.append(_Token(kind, word, position))
        position = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


def _literal(token: _Token) -> str:
    """A value written back single-quoted (a doubled quote stands for one), or a plain number."""
    if token.kind == "number":
        return token.text
    quote = token.text[0]
    value = token.text[1:-1].replace(quote * 2, quote)
    return "'" + value.replace("'", "''") + "'"


class _Parser:
    """Recursive descent over the tokens; each method writes back what it read."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.index = 0
        self.depth = 0
        self.comparisons = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def take(self, kind: str, text: str | None = None) -> _Token | None:
        token = self.token
        if token.kind == kind and (text is None or token.text == text):
            self.index += 1
            return token
        return None

    def expect(self, kind: str, text: str | None, wanted: str) -> _Token:
        token = self.take(kind, text)
        if token is None:
            found = repr(self.token.text) if self.token.kind != "end" else "the end"
            raise QueryError(f"expected {wanted} at character {self.token.at + 1}, found {found}")
        return token

    def expression(self) -> str:
        parts = [self.conjunction()]
        while self.take("keyword", "OR"):
            parts.append(self.conjunction())
        return " OR ".join(parts)

    def conjunction(self) -> str:
        parts = [self.unary()]
        while self.take("keyword", "AND"):
            parts.append(self.unary())
        return " AND ".join(parts)

    def unary(self) -> str:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise QueryError(f"the query nests deeper than {MAX_DEPTH} levels")
        try:
            if self.take("keyword", "NOT"):
                return f"NOT {self.unary()}"
            if self.take("punctuation", "("):
                inner = self.expression()
                self.expect("punctuation", ")", "')'")
                return f"({inner})"
            return self.comparison()
        finally:
            self.depth -= 1

    def value(self) -> str:
        token = self.take("string") or self.take("number")
        if token is None:
            self.expect("string", None, "a quoted value or a number")
        assert token is not None
        return _literal(token)

    def comparison(self) -> str:
        self.comparisons += 1
        if self.comparisons > MAX_COMPARISONS:
            raise QueryError(f"the query has more than {MAX_COMPARISONS} comparisons")
        name = self.expect("name", None, "a search attribute's name").text
        if operator := self.take("operator"):
            return f"{name} {'!=' if operator.text == '<>' else operator.text} {self.value()}"
        if self.take("keyword", "IS"):
            negated = " NOT" if self.take("keyword", "NOT") else ""
            self.expect("keyword", "NULL", "NULL")
            return f"{name} IS{negated} NULL"
        negated = "NOT " if self.take("keyword", "NOT") else ""
        if self.take("keyword", "IN"):
            self.expect("punctuation", "(", "'('")
            values = [self.value()]
            while self.take("punctuation", ","):
                values.append(self.value())
            self.expect("punctuation", ")", "')'")
            return f"{name} {negated}IN ({', '.join(values)})"
        if self.take("keyword", "BETWEEN"):
            low = self.value()
            self.expect("keyword", "AND", "AND")
            return f"{name} {negated}BETWEEN {low} AND {self.value()}"
        self.expect("keyword", "STARTS_WITH", "a comparison (=, !=, <, >, IN, BETWEEN, IS NULL, STARTS_WITH)")
        return f"{name} {negated}STARTS_WITH {self.value()}"


def canonical_query(text: str) -> str:
    """``text`` as one expression in canonical form, or ``QueryError`` saying why not."""
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is longer than {MAX_QUERY_CHARS:,} characters")
    if not text.strip():
        raise QueryError("the query is empty")
    parser = _Parser(text)
    written = parser.expression()
    parser.expect("end", None, "AND, OR or the end of the query")
    return written


def quoted(value: str) -> str:
    """A value of ours (a phase, a starter's name, a word, a run's id) as a query literal.

    Both escapes matter: the server's dialect reads a backslash as escaping the next character, so
    ``a\\`` quoted with its quotes doubled alone would become ``'a\\'``, whose last quote no longer ends
    the literal, and what follows (``OR …``, ``--``) would be read as query. Checked on the dev server
    (tests/test_bulk_decisions.py): a literal from here is one value, whatever it holds; a value with a
    backslash matches nothing there, so our own values never hold one (runtime/run_memo.py
    ``starter_keyword`` percent-encodes names, question words are letters and digits)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def one_of(name: str, values: Iterable[str]) -> str:
    """``name IN ('a', 'b')``: the attribute holds one of our ``values``, each ``quoted``."""
    return f"{name} IN ({', '.join(map(quoted, values))})"


def instant(moment: datetime) -> str:
    """A moment as a query's time literal, in UTC (``2026-01-02T03:04:05Z``), for ``quoted``."""
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def all_of(*clauses: str) -> str:
    """The clauses ANDed, each in parentheses (a clause is one expression: ours, or a canonical query)."""
    return " AND ".join(f"({clause})" for clause in clauses if clause)
