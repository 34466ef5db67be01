"""``.env`` read as python-dotenv reads it (DeerFlow's ``load_dotenv``), in time linear in the file, with
its ``${VAR}`` expansion bounded and filled from the variables the settings are loaded from.

python-dotenv itself is not used to read it, because a file it reads can hang every entry point (the
class of issue #42 §5's YAML alias bomb), and because of where it looks for ``${VAR}``:

* Its expansion copies a value wherever it is named, so ``A=x``, ``B=${A}${A}``, ``C=${B}${B}`` … doubles
  on each line: 30 lines are 8 GB, built before anything could refuse them. Here what ``${…}`` puts into
  the file's values is counted as it is put, and past :data:`MAX_EXPANDED_CHARS` in all the file is
  refused, naming the line and the variable, before the value is built.
* Its ``${VAR}`` pattern backtracks: 10,000 ``${`` on one line took 30 s, 20,000 took 160 s. And its
  inline-comment strip does: a value holding 40,000 blanks not followed by ``#`` took 30 s. Both are
  scanned here, each character a bounded number of times.
* It fills ``${VAR}`` from the process's environment, whatever variables ``load_settings`` was handed,
  so a test (or any caller with variables of its own) and the CLI read another ``.env`` than each
  other. Here ``${VAR}`` reads the file's earlier lines with those variables over them: the variables
  win, as they win over ``.env`` for every setting, and as DeerFlow's ``load_dotenv`` (which leaves a
  variable the environment sets alone) resolves them. An empty variable counts as unset, as everywhere.

The grammar is python-dotenv 1.2's (``dotenv/parser.py``), to which tests/test_env_file.py holds this
reader on generated files: ``export``, quoted keys, single- and double-quoted values with their escapes,
inline comments, a key without ``=`` (no value, not a variable), and a line that cannot be read, which
is skipped with a warning naming the file and line, as python-dotenv skips it.
"""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from config.config_files import MAX_EXPANDED_CHARS, ConfigError, file_text

# python-dotenv's own patterns (dotenv/parser.py), each matched anchored where the reader stands: linear.
_SPACE = re.compile(r"\s*")
_BLANKS = re.compile(r"[^\S\r\n]*")
_EXPORT = re.compile(r"(?:export[^\S\r\n]+)?")
_QUOTED_KEY = re.compile(r"'([^']+)'")
_KEY = re.compile(r"([^=\#\s]+)")
_EQUALS = re.compile(r"(=[^\S\r\n]*)")
_QUOTED = {"'": re.compile(r"'((?:\\.|[^'\\])*)'", re.DOTALL), '"': re.compile(r'"((?:\\.|[^"\\])*)"', re.DOTALL)}
_ESCAPES = {"'": re.compile(r"\\[\\']"), '"': re.compile(r"\\[\\'\"abfnrtv]")}
_UNQUOTED = re.compile(r"([^\r\n]*)")
_COMMENT = re.compile(r"(?:[^\S\r\n]*#[^\r\n]*)?")
_END = re.compile(r"[^\S\r\n]*(?:\r\n|\n|\r|$)")
_REST = re.compile(r"[^\r\n]*(?:\r|\n|\r\n)?")
_NEWLINES = re.compile(r"\r\n|\r|\n")
_NAME_END = re.compile(r"[}:]")

logger = logging.getLogger(__name__)


class Binding(NamedTuple):
    """One ``NAME=value`` as written (``value`` None for a bare ``NAME``), and its line."""

    key: str
    value: str | None
    line: int


class _Unreadable(Exception):
    pass


class _Reader:
    """python-dotenv's ``parse_stream``: the bindings of ``text``, in order."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text.removeprefix("\ufeff"), 0
        self._counted, self._line = 0, 1

    def bindings(self) -> Iterator[Binding | int]:
        """Each binding, or the line number of a statement that cannot be read."""
        while self.at < len(self.text):
            self._read(_SPACE)
            if self.at >= len(self.text):
                return
            line = self.line()
            try:
                key, value = self._statement()
            except _Unreadable:
                self._read(_REST)
                yield line
                continue
            if key is not None:
                yield Binding(key, value, line)

    def line(self) -> int:
        """The line the reader is on, counted from where it was last asked (so the file once)."""
        self._line += len(_NEWLINES.findall(self.text, self._counted, self.at))
        self._counted = self.at
        return self._line

    def _statement(self) -> tuple[str | None, str | None]:
        self._read(_EXPORT)
        key = None if self._peek() == "#" else self._read(_QUOTED_KEY if self._peek() == "'" else _KEY)
        self._read(_BLANKS)
        value = None
        if self._peek() == "=":
            equals = self._read(_EQUALS)
            value = "" if len(equals) > 1 and self._peek() == "#" else self._value()
        self._read(_COMMENT)
        self._read(_END)
        return key, value

    def _value(self) -> str:
        quote = self._peek()
        if quote in _QUOTED:
            return _ESCAPES[quote].sub(lambda escape: codecs.decode(escape.group(0), "unicode-escape"),
                                       self._read(_QUOTED[quote]))
        if quote in ("", "\n", "\r"):
            return ""
        return _without_comment(self._read(_UNQUOTED)).rstrip()

    def _peek(self) -> str:
        return self.text[self.at:self.at + 1]

    def _read(self, pattern: re.Pattern[str]) -> str:
        """What ``pattern`` matches here (its group, if it has one), moving past it."""
        match = pattern.match(self.text, self.at)
        if match is None:
            raise _Unreadable
        self.at = match.end()
        return match.group(1) if pattern.groups else match.group(0)


def _without_comment(part: str) -> str:
    """``part`` up to its first blank that a run of blanks and then ``#`` follows: python-dotenv's
    ``re.sub(r"\\s+#.*", "", part)``, found by scanning for each ``#`` once."""
    hash_at = part.find("#", 1)
    while hash_at > 0 and not part[hash_at - 1].isspace():
        hash_at = part.find("#", hash_at + 1)
    return part[:hash_at] if hash_at > 0 else part


def read_env_file(path: Path, variables: Mapping[str, str]) -> dict[str, str]:
    """The variables the ``.env`` file at ``path`` sets (none when it is absent), ``${VAR}`` filled from
    ``variables`` over its earlier lines (:func:`read_env_text`); a bare ``NAME`` sets nothing."""
    if not path.is_file():
        return {}
    values = read_env_text(file_text(path, "="), variables, path)
    return {key: value for key, value in values.items() if value is not None}


def read_env_text(text: str, variables: Mapping[str, str], path: Path) -> dict[str, str | None]:
    """The variables ``text`` (the file at ``path``) sets, each ``${NAME}`` and ``${NAME:-default}`` filled
    from the lines above it with ``variables`` over them; a bare ``NAME`` is None.

    Raises :class:`ConfigError` when the expansion puts more than :data:`MAX_EXPANDED_CHARS` into the
    values, naming the line and the variable where it did.
    """
    values: dict[str, str | None] = {}
    budget, unreadable = MAX_EXPANDED_CHARS, []
    for binding in _Reader(text).bindings():
        if isinstance(binding, int):
            unreadable.append(binding)
            continue
        if binding.value is None:
            values[binding.key] = None
            continue
        pieces = list(_expanded(binding.value, values, variables))
        budget -= sum(len(piece) for piece, named in pieces if named)
        if budget < 0:
            raise ConfigError([f"{path}: line {binding.line} ({binding.key}): its ${{…}} variables expand the "
                               f"file past {MAX_EXPANDED_CHARS:,} characters (a value copied into the next line "
                               "after line?); write the values out"])
        values[binding.key] = "".join(piece for piece, _ in pieces)
    if unreadable:  # one warning, however many lines
        more = f" and {len(unreadable) - 5} more" if len(unreadable) > 5 else ""
        logger.warning("%s: line %s cannot be read as NAME=value (skipped, as DeerFlow's load_dotenv skips it)",
                       path, ", ".join(map(str, unreadable[:5])) + more)
    return values


def _expanded(value: str, values: Mapping[str, str | None], variables: Mapping[str, str],
              ) -> Iterator[tuple[str, bool]]:
    """The pieces of ``value``: its text as written (False), and what each ``${…}`` stands for (True),
    each a reference to a string already built. python-dotenv's ``${name}`` / ``${name:-default}``
    (a name holds neither ``}`` nor ``:``): each place is looked at a bounded number of times."""
    cursor = start = 0
    while (start := value.find("${", start)) >= 0:
        end_of_name = _NAME_END.search(value, start + 2)
        if end_of_name is None:  # no "}" or ":" after it: no reference from here on
            break
        name_end, default = end_of_name.start(), None
        if value[name_end] == "}":
            end = name_end
        elif not value.startswith(":-", name_end):  # "${name:x": no reference, nor any "${" before the ":"
            start = name_end + 1
            continue
        elif (end := value.find("}", name_end + 2)) < 0:  # no "}" after it: no reference from here on
            break
        else:
            default = value[name_end + 2:end]
        yield value[cursor:start], False
        yield _lookup(value[start + 2:name_end], default, values, variables), True
        cursor = start = end + 1
    yield value[cursor:], False


def _lookup(name: str, default: str | None, values: Mapping[str, str | None], variables: Mapping[str, str]) -> str:
    """python-dotenv's ``Variable.resolve``: a name that is set (the file's bare ``NAME`` included) is its
    value, else the default."""
    if name in variables:
        return variables[name]
    if name in values:
        return values[name] or ""
    return default or ""
