"""``.env`` is read as python-dotenv reads it, in bounded time, with ``${VAR}`` from the variables the
settings are loaded from (config/env_file.py; issue #42 §5's class: a file that hangs every entry point).

Seen before: ``A=x``, ``B=${A}${A}``, ``C=${B}${B}`` … doubled on each line (30 lines: 8 GB, built before
anything could refuse them); 10,000 ``${`` on one line took python-dotenv 30 s, 40,000 blanks in a value
30 s; and its ``${VAR}`` read the process's environment, not the variables ``load_settings`` was handed.
The entry points themselves: test_config_errors.py.
"""

from __future__ import annotations

import io
import os
import random
from pathlib import Path
from unittest import mock

import pytest
from dotenv.main import DotEnv, resolve_variables

from config.config_files import MAX_EXPANDED_CHARS, ConfigError
from config.env_file import read_env_text
from config.settings import load_settings

pytestmark = pytest.mark.timeout(60)  # each shape below ran for minutes to hours before

WHERE = Path("/etc/deerflow/.env")


def doubling(lines: int) -> str:
    """``A`` eight characters, then each line twice the one before: 8 * 2**lines characters at the end."""
    named = ["A", *(f"L{n}" for n in range(lines))]
    return "A=xxxxxxxx\n" + "".join(f"L{n}=${{{named[n]}}}${{{named[n]}}}\n" for n in range(lines))


# ---------------------------------------------------------------- python-dotenv's grammar, exactly

TOKENS = ["A", "B", "AB", "_x", "=", " ", "\t", "\n", "\r\n", "\r", "#", " #", "'", '"', "\\", "\\n", "\\'", '\\"',
          "${", "}", ":", ":-", "${A}", "${B:-d}", "${C}", "$", "export ", "x", "é", "\u00a0", "\x0b", "\ufeff"]


def dotenv_reads(text: str, variables: dict[str, str]) -> dict[str, str | None]:
    """python-dotenv's own reading, ``${VAR}`` resolved as ``load_dotenv`` resolves it (the environment's
    variable over the file's), with ``variables`` as the whole environment."""
    with mock.patch.dict(os.environ, variables, clear=True):
        return dict(resolve_variables(DotEnv(None, stream=io.StringIO(text)).parse(), override=False))


def test_files_are_read_as_python_dotenv_reads_them() -> None:
    """Three thousand small files of the characters its grammar turns on, seeded: the same values."""
    chance = random.Random(42)
    for _ in range(3_000):
        text = "".join(chance.choice(TOKENS) for _ in range(chance.randint(1, 40)))
        variables = chance.choice([{}, {"A": "from-env"}, {"B": "b", "C": "c"}])
        assert read_env_text(text, variables, WHERE) == dotenv_reads(text, variables), repr(text)


def test_the_forms_a_file_uses_are_read_as_python_dotenv_reads_them() -> None:
    text = ("# a comment\nexport A=plain # note\nB='single ${A} \\'q\\''\nC=\"double\\n${A}\\t${Z:-dflt}\"\n"
            "'QUOTED KEY'=1\nBARE\nD=${BARE}|${A:x}|${A}\nE= #empty\nF=x#not-a-comment\nG=\"unterminated\n"
            "H=after\r\nI=${H}\n")
    assert read_env_text(text, {}, WHERE) == dotenv_reads(text, {}) == {
        "A": "plain", "B": "single plain 'q'", "C": "double\nplain\tdflt", "QUOTED KEY": "1", "BARE": None,
        "D": "|${A:x}|plain", "E": "", "F": "x#not-a-comment", "H": "after", "I": "after"}


# ---------------------------------------------------------------- bounded


def test_a_doubling_file_is_refused_at_the_line_that_passes_the_bound() -> None:
    """Thirty lines were 8 GB: refused before the value is built, at the first line past a million."""
    with pytest.raises(ConfigError) as refused:
        read_env_text(doubling(60), {}, WHERE)
    [line] = refused.value.problems
    assert line.startswith(f"{WHERE}: line 17 (L15): its ${{…}} variables expand the file past 1,000,000 "), line
    assert read_env_text(doubling(15), {}, WHERE)["L14"] == "x" * 8 * 2**15  # 262,144: within the bound


def test_a_value_named_on_many_lines_counts_each_time() -> None:
    """Not only doubling: each line copying one big value adds up."""
    text = "BIG=" + "x" * 100_000 + "\n" + "".join(f"C{n}=${{BIG}}\n" for n in range(20))
    with pytest.raises(ConfigError, match=r"line 12 \(C10\)"):
        read_env_text(text, {}, WHERE)
    with pytest.raises(ConfigError, match=r"line 1 \(C\)"):  # the variables' values count too
        read_env_text("C=${BIG}${BIG}\n", {"BIG": "x" * (MAX_EXPANDED_CHARS // 2 + 1)}, WHERE)


@pytest.mark.parametrize(("value", "read"), [
    ("${" * 500_000, None),  # python-dotenv: 30 s for 10,000, and four times that for each doubling
    ("${a:" * 250_000, None),
    ("${a:-" * 200_000, None),
    ("x" + " " * 1_000_000 + "y", None),  # its inline-comment strip: 30 s for 40,000
    ("x" + " #" * 500_000, "x"),
], ids=["dollar-braces", "names-without-dash", "defaults-without-brace", "blanks", "blank-hashes"])
def test_a_megabyte_line_of_the_shapes_that_made_it_backtrack_is_read(value: str, read: str | None) -> None:
    assert read_env_text(f"A={value}\nB=1\n", {}, WHERE) == {"A": read or value, "B": "1"}


# ---------------------------------------------------------------- ${VAR} reads what load_settings is handed


def test_a_variable_in_dot_env_is_filled_from_the_variables_the_settings_are_loaded_from(tmp_path: Path) -> None:
    """python-dotenv read ``os.environ``: a caller's own variables (a test's, the CLI's) were not seen."""
    env_file = tmp_path / ".env"
    env_file.write_text("SEARCH_API=${CHOSEN_SEARCH:-brave_search}\nLOG_LEVEL=${CHOSEN_LEVEL:-info}\n")
    files = {"DEERFLOW_ENV_FILE": str(env_file), "DEERFLOW_CONF": str(tmp_path / "absent.yaml")}
    assert "CHOSEN_SEARCH" not in os.environ
    given = load_settings({**files, "CHOSEN_SEARCH": "duckduckgo", "CHOSEN_LEVEL": "debug"})
    assert (given.search_api, given.log_level) == ("duckduckgo", "DEBUG")
    # Empty counts as unset, as for every setting.
    assert load_settings({**files, "CHOSEN_LEVEL": ""}).log_level == "INFO"


def test_the_variables_win_over_the_files_earlier_line_as_they_win_over_the_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("TAVILY_API_KEY=from-the-file\nSEARCH_API=tavily\nBRAVE_SEARCH_API_KEY=${TAVILY_API_KEY}\n")
    settings = load_settings({"DEERFLOW_ENV_FILE": str(env_file), "DEERFLOW_CONF": str(tmp_path / "absent.yaml"),
                              "TAVILY_API_KEY": "from-the-environment"})
    assert settings.tavily_api_key == settings.brave_search_api_key == "from-the-environment"
