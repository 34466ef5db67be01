"""conf.yaml's loader: YAML's safe subset, refusing what a settings file never needs (config/config_files.py
says what and why), and each problem as one line naming the key, the line and the column.

Imported by :func:`config.config_files.read_conf_yaml` only when there is a conf.yaml to read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from config.config_files import MAX_DEPTH, ConfigError, file_text


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


def parse_conf_yaml(path: Path) -> Any:
    """The document in the file ``path``; :class:`ConfigError` for anything the loader refuses or cannot read."""
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
