"""Reading the operator's two files, ``conf.yaml`` and ``.env``: whatever they hold, one line and exit 2.

The files are trusted, but a careless edit (a stray byte from another encoding, an unclosed list, a
tag copied from elsewhere) or a pasted document must not cost a traceback, a hang or a crash. So:

* Both are decoded as UTF-8 first; a byte that is not is named by line (and the key on it).
* ``conf.yaml`` is YAML's safe subset, composed by :class:`_ConfLoader`, which refuses what a
  settings file never needs, naming the key it was found under: aliases (``*name``, ``<<: *name``),
  because nine nested aliases make a billion-node tree that every later walk (the ``$VAR``
  expansion, validation) would follow; nesting deeper than :data:`MAX_DEPTH` (the composer recurses:
  20,000 levels were a RecursionError); and tags other than YAML's plain types (``!!python/object``).
  So nothing walks more than the file's own size.
* A YAML syntax error is its first line and the place (line, column, key).

``.env``'s grammar and its ``${VAR}`` expansion are config/env_file.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """The configuration's problems, one line each: what an entry point prints before exit code 2."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


# What variables may put into one file's values, in all (``${VAR}`` in ``.env``, ``$VAR`` in conf.yaml):
# far above any real file (a certificate or two), far below what a file naming a value in every line
# (or, in .env, a line doubling the one before) reaches.
MAX_EXPANDED_CHARS = 1_000_000

# DeerFlow's deepest setting is MCP_SERVERS.<name>.env.<VAR> (4 levels); the limit leaves room.
MAX_DEPTH = 32


class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _ConfLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses aliases, deep nesting and unknown tags as it composes,
    remembering the key path it was composing when something failed."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.path: list[str] = []
        self.failed_at: list[str] | None = None

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:  # type: ignore[override]
        if isinstance(index, yaml.ScalarNode | int):
            self.path.append(str(index.value if isinstance(index, yaml.ScalarNode) else index))
        try:
            self._check(self.peek_event())
            return super().compose_node(parent, index)  # type: ignore[no-any-return]
        except yaml.YAMLError:
            if self.failed_at is None:
                self.failed_at = list(self.path)
            raise
        finally:
            if isinstance(index, yaml.ScalarNode | int):
                self.path.pop()

    def _check(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"an alias (*{event.anchor}) is not accepted: write the value out", event.start_mark)
        if len(self.path) > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        tag = getattr(event, "tag", None)
        if tag is not None and tag != "!" and tag not in self.yaml_constructors:
            raise _Refused(f"the tag {tag.replace('tag:yaml.org,2002:', '!!')} is not accepted "
                           "(conf.yaml holds plain values)", event.start_mark)


def read_conf_yaml(path: Path) -> Any:
    """The document in ``path`` (None when there is no such file); :class:`ConfigError` otherwise."""
    if not path.is_file():
        return None
    loader = _ConfLoader(file_text(path, ":"))
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        raise ConfigError([f"{path}: {_yaml_problem(error, loader.failed_at)}"]) from None
    except (ValueError, TypeError, OverflowError) as error:  # a typed value that is not one: !!int abc
        raise ConfigError([f"{path}: a value cannot be read as its type ({str(error)[:200]})"]) from None
    finally:
        loader.dispose()


def _yaml_problem(error: yaml.YAMLError, key_path: list[str] | None) -> str:
    """One line: where (key, line, column) and what, from PyYAML's multi-line message."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    mark = getattr(error, "problem_mark", None)
    key = ".".join(key_path[:4]) + (".…" if len(key_path) > 4 else "") if key_path else "the document"
    place = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{key}{place}: {problem}{f', {context}' if context else ''}"


def file_text(path: Path, separator: str) -> str:
    """The file as UTF-8 text; a byte that is not UTF-8 is refused by line, with the setting named on
    it (the text before ``separator``) if any."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ConfigError([f"{path}: cannot be read ({error.strerror or error})"]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[data.rfind(b"\n", 0, error.start) + 1:error.start].decode("utf-8", "replace")
        name, found, _ = line.partition(separator)
        named = f" ({name.strip()})" if found and name.strip().replace("_", "").replace(".", "").isalnum() else ""
        number = data.count(b"\n", 0, error.start) + 1
        raise ConfigError([f"{path}: line {number}{named}: byte "
                           f"0x{data[error.start]:02x} is not UTF-8 text; save the file as UTF-8"]) from None
