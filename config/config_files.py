"""Reading the operator's two files, ``conf.yaml`` and ``.env``: whatever they hold, one line and exit 2.

The files are trusted, but a careless edit (a stray byte from another encoding, an unclosed list, a
tag copied from elsewhere) or a pasted document must not cost a traceback, a hang or a crash. So:

* Both are decoded as UTF-8 first; a byte that is not is named by line (and the key on it).
* ``conf.yaml`` is YAML's safe subset, composed by config/conf_yaml.py's loader, which refuses what a
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


def read_conf_yaml(path: Path) -> Any:
    """The document in ``path`` (None when there is no such file); :class:`ConfigError` otherwise.

    PyYAML and our loader (config/conf_yaml.py) are imported only when there is a file: about 0.01 s
    of CPU of every command without one (issue #45)."""
    if not path.is_file():
        return None
    from config.conf_yaml import parse_conf_yaml

    return parse_conf_yaml(path)


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
