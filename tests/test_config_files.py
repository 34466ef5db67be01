"""conf.yaml and .env, however broken, are one line naming the file and the setting, and no secret is
shown in any line about the configuration (issue #42 §5; config/config_files.py, config/secrets.py).

Seen before: conf.yaml nested 20,000 deep, a non-UTF-8 byte in conf.yaml or .env, an unclosed list and
a ``!!python/object`` tag each exited 1 with a traceback; nine nested YAML aliases under MCP_SERVERS
hung every entry point (the ``$VAR`` expansion walked the billion-node tree); and a secret put into a
setting that is not one (``LOG_LEVEL=${OPENAI_API_KEY}``, ``model: $OPENAI_API_KEY``) was printed
whole. The entry points themselves: test_config_errors.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from config.secrets import MASK, Secrets, known_secrets
from config.settings import ConfigError, load_settings

pytestmark = pytest.mark.timeout(30)  # the alias bomb ran for ever

SECRET = "sk-THE-SECRET-0123456789"


def alias_bomb() -> str:
    """Nine levels of nine aliases: 9**9 (387 million) leaves once expanded, a few hundred bytes as written."""
    lines = ["MCP_SERVERS:", "  bomb:", "    l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 9)]
    return "\n".join(lines) + "\n"


BROKEN_CONF: dict[str, tuple[bytes, str]] = {
    "nested 20,000 deep": (b"MCP_SERVERS: " + b"[" * 20_000 + b"]" * 20_000 + b"\n",
                           "MCP_SERVERS.0.0.0.\u2026 (line 1, column 46): nested deeper than 32 levels"),
    "not UTF-8": (b"BASIC_MODEL:\n  model: caf\xe9\n", "line 2 (model): byte 0xe9 is not UTF-8 text"),
    "an unclosed list": (b"RESOURCE_ROOTS: [a, b\n", "RESOURCE_ROOTS (line 2, column 1): expected ',' or ']'"),
    "a python tag": (b"BASIC_MODEL: !!python/object:os.system {}\n",
                     "BASIC_MODEL (line 1, column 14): the tag !!python/object:os.system is not accepted"),
    "an alias bomb": (alias_bomb().encode(), "MCP_SERVERS.bomb.l1.0 (line 4, column 14): an alias (*l0) is not "
                                             "accepted"),
    "a merge key": (b"BASIC_MODEL: &m {model: m}\nREASONING_MODEL:\n  <<: *m\n", "REASONING_MODEL.<< (line 3, "
                                                                                   "column 7): an alias (*m)"),
    "a typed value that is not its type": (b"TOKEN_LIMIT: !!int lots\n", "a value cannot be read as its type"),
    "an unhashable key": (b"RESOURCE_ROOTS:\n  ? [a, b]\n  : c\n", "found unhashable key"),
}


def problems(tmp_path: Path, conf: bytes = b"", env_file: bytes = b"", **environ: str) -> list[str]:
    (tmp_path / "conf.yaml").write_bytes(conf)
    (tmp_path / ".env").write_bytes(env_file)
    with pytest.raises(ConfigError) as refused:
        load_settings(environ, conf_path=tmp_path / "conf.yaml", env_file=tmp_path / ".env")
    return refused.value.problems


@pytest.mark.parametrize("case", BROKEN_CONF)
def test_a_broken_conf_yaml_is_one_line_naming_the_file_and_the_place(tmp_path: Path, case: str) -> None:
    content, expected = BROKEN_CONF[case]
    [line] = problems(tmp_path, content)
    assert line.startswith(f"{tmp_path / 'conf.yaml'}: ") and expected in line, line


def test_a_non_utf8_env_file_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    [line] = problems(tmp_path, env_file=b"SEARCH_API=tavily\nLOG_LEVEL=caf\xe9\n")
    assert line == f"{tmp_path / '.env'}: line 2 (LOG_LEVEL): byte 0xe9 is not UTF-8 text; save the file as UTF-8"


def test_a_bad_value_names_where_it_came_from(tmp_path: Path) -> None:
    lines = problems(tmp_path, b"BASIC_MODEL:\n  max_retries: lots\n", b"LOG_LEVEL=loud\n")
    [env_line] = [line for line in lines if line.startswith("LOG_LEVEL")]
    [conf_line] = [line for line in lines if line.startswith("LLM_MAX_RETRIES")]
    assert env_line.startswith("LOG_LEVEL='LOUD': Input should be") and env_line.endswith(f"({tmp_path / '.env'})")
    assert conf_line.startswith("LLM_MAX_RETRIES='lots'") and conf_line.endswith(f"({tmp_path / 'conf.yaml'})")


@pytest.mark.parametrize(("conf", "env_file", "environ"), [
    (b"", f"OPENAI_API_KEY={SECRET}\nLOG_LEVEL=${{OPENAI_API_KEY}}\n".encode(), {}),  # .env's ${VAR}; upper-cased
    (b"", b"LOG_LEVEL=x${OPENAI_API_KEY}\n", {"OPENAI_API_KEY": SECRET}),  # .env's ${VAR} of the environment's
    (b"BASIC_MODEL:\n  max_retries: $ARK_KEY\n", b"", {"ARK_KEY": SECRET}),  # conf.yaml's $VAR
    (b"", b"", {"MY_DEPLOYMENT_PASS": SECRET, "DEERFLOW_SECRET_ENV_NAMES": "MY_DEPLOYMENT_PASS",
                "LLM_MAX_CONCURRENCY": f"x{SECRET}"}),  # a listed variable, inside another value
    (f"BASIC_MODEL:\n  api_key: {SECRET}\nSEARCH_ENGINE:\n  engine: {SECRET}\n".encode(), b"", {}),  # a literal key
    (b"", b"", {"DEERFLOW_WEB_TOKENS": f'[{{"name": "ann", "token": "{SECRET}"}}]', "DEERFLOW_WEB_TOKEN": SECRET}),
    (b"", f"OPENAI_API_KEY={SECRET}\nRAG_PROVIDER=${{OPENAI_API_KEY}}\n".encode(), {}),  # a refused DeerFlow value
], ids=["dotenv-interpolation", "dotenv-interpolation-of-environment", "conf-variable", "listed-variable",
        "conf-literal", "named-token", "deerflow-refusal"])
def test_a_secret_in_a_setting_that_is_not_one_is_never_shown(tmp_path: Path, conf: bytes, env_file: bytes,
                                                               environ: dict[str, str]) -> None:
    lines = problems(tmp_path, conf, env_file, **environ)
    assert lines and all(SECRET.lower() not in line.lower() for line in lines), lines
    assert MASK in "\n".join(lines)


def test_a_key_used_as_the_model_name_is_masked_where_the_settings_are_shown(tmp_path: Path) -> None:
    (tmp_path / "conf.yaml").write_text("BASIC_MODEL:\n  model: $OPENAI_API_KEY\nREASONING_MODEL:\n  model: r1\n")
    settings = load_settings({"OPENAI_API_KEY": SECRET, "LOG_LEVEL": "info"}, conf_path=tmp_path / "conf.yaml",
                             env_file=tmp_path / "absent.env")
    assert settings.basic_model == SECRET  # used as given: only what is shown is masked
    assert settings.shown("BASIC_MODEL", settings.basic_model) == MASK
    assert settings.shown("REASONING_MODEL", settings.reasoning_model or "") == "r1"
    assert settings.shown("LOG_LEVEL", "INFO") == "INFO"
    assert settings.masked(f"model {SECRET.upper()} failed") == f"model {MASK} failed"


def test_secrets_are_known_by_name_and_by_key_and_matched_in_any_case() -> None:
    secrets = known_secrets({"OPENAI_API_KEY": "sk-abcdefgh", "TOKEN_LIMIT": "32000000", "SHORT_KEY": "abc",
                             "DEERFLOW_WEB_TOKENS": '[{"name": "a-long-holder-name", "token": "tok-12345678"}]'},
                            {"MCP_SERVERS": {"wiki": {"headers": {"Authorization": "Bearer hdr-12345678"},
                                                      "env": {"WIKI_TOKEN": "env-12345678", "MODE": "readonly-x"}}}})
    assert secrets.mask("SK-ABCDEFGH tok-12345678 Bearer hdr-12345678 env-12345678") == " ".join([MASK] * 4)
    for shown in ("32000000", "abc", "a-long-holder-name", "readonly-x"):  # named for what they count; short; names
        assert not secrets.holds(shown), shown
    assert Secrets(["longer-secret-value", "secret-value"]).mask("x longer-secret-value") == f"x {MASK}"


def test_a_variable_named_in_every_line_of_conf_yaml_is_bounded_as_it_is_put(tmp_path: Path) -> None:
    """conf.yaml's ``$VAR`` copies nothing, but every later walk (the secrets are looked for in every
    string) reads the value once per place it is named: 100,000 places of a 1 MB value were 100 GB."""
    conf = "RESOURCE_ROOTS:\n" + "  - $BIG\n" * 100  # the 51st place passes a million
    [line] = problems(tmp_path, conf.encode(), BIG="x" * 20_000)
    assert line == (f"{tmp_path / 'conf.yaml'}: RESOURCE_ROOTS.50: $BIG and the variables before it put more than "
                    "1,000,000 characters into the file; write the values out")
    (tmp_path / "ten.yaml").write_text("RESOURCE_ROOTS:\n" + "  - $BIG\n" * 10)  # a million in all: read
    settings = load_settings({"BIG": "/" + "x" * 99_999}, conf_path=tmp_path / "ten.yaml", env_file=tmp_path / ".env")
    assert len(settings.resource_roots or []) == 10
