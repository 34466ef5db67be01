"""A bad value is one line naming it and exit code 2 in every entry point (issue #21): the worker,
the CLI, the API server and the codec server. It used to be a traceback of 25 to 35 lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from offline.providers import without_provider_settings
from tests.support.processes import REPO_DIR
from tests.support.zygote import zygote

pytestmark = pytest.mark.timeout(120)


def run(tmp_path: Path, args: list[str], conf: str | bytes | None = None, **env: str | None) -> tuple[int, list[str]]:
    """``args`` run as a user runs them, with ``env`` (None: unset) and ``conf`` as its conf.yaml (a
    ``.env`` is ``absent.env``, if a test writes it); the exit code and the non-empty output lines."""
    conf_path = tmp_path / "conf.yaml"
    if conf is not None:
        conf_path.write_bytes(conf.encode() if isinstance(conf, str) else conf)
    environ = {**without_provider_settings(os.environ), "DEERFLOW_HOME": str(tmp_path / "home"),
               "DEERFLOW_CONF": str(conf_path), "DEERFLOW_ENV_FILE": str(tmp_path / "absent.env"),
               "TEMPORAL_ADDRESS": "127.0.0.2:9", **env}
    environ = {name: value for name, value in environ.items() if value is not None}
    done = zygote().run(REPO_DIR / args[0], args[1:], env=environ, cwd=REPO_DIR, timeout=90)
    return done.returncode, [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


@pytest.mark.parametrize(("args", "name", "value"), [
    (["worker.py"], "LLM_MAX_CONCURRENCY", "abc"),
    (["starter.py", "list"], "DEERFLOW_WEB_ALLOWED_ORIGINS", '["http://localhost:3000"]'),
    (["starter.py", "serve", "--port", "9"], "DEERFLOW_WEB_MAX_STREAMS", "0"),
    (["starter.py", "codec-server", "--port", "9"], "DEERFLOW_CODEC_MAX_BODY_BYTES", "1"),
], ids=["worker", "cli", "api-server", "codec-server"])
def test_a_bad_value_is_one_line_and_exit_code_2(tmp_path: Path, args: list[str], name: str, value: str) -> None:
    code, lines = run(tmp_path, args, **{name: value})
    assert (code, len(lines)) == (2, 1), lines
    assert f"{name}={value!r}" in lines[0]


def test_each_problem_of_a_deerflow_set_up_is_its_own_line(tmp_path: Path) -> None:
    conf = "BASIC_MODEL:\n  model: m\n  api_key: $NOT_SET\n  platform: google_aistudio\n"
    code, lines = run(tmp_path, ["worker.py"], conf=conf, SEARCH_API="infoquest", LANGSMITH_API_KEY="ls-secret")
    assert code == 2
    assert [line.split(" ERROR root: ")[-1].split(":")[0] for line in lines] == [
        "LANGSMITH_API_KEY=***", str(tmp_path / "conf.yaml"), str(tmp_path / "conf.yaml"), "SEARCH_API='infoquest'"]
    assert "ls-secret" not in "\n".join(lines)


def test_config_prints_each_value_with_its_source_and_masks_secrets(tmp_path: Path) -> None:
    (tmp_path / "absent.env").write_text("SEARCH_API=brave_search\nBRAVE_SEARCH_API_KEY=brave-secret\n")
    conf = "BASIC_MODEL:\n  base_url: http://127.0.0.1:9/v1\n  model: users-model\n  api_key: $ARK_KEY\n"
    code, lines = run(tmp_path, ["starter.py", "config"], conf=conf, ARK_KEY="ark-secret", LLM_MAX_CONCURRENCY="3",
                      DEERFLOW_RUN_TOKEN_BUDGET="50000", DEERFLOW_CODEC_TOKEN="codec-secret",
                      DEERFLOW_WEB_TOKENS='[{"name": "ann", "token": "web-secret-of-ann-00"}]')
    assert code == 0, lines
    conf_path, env_path = tmp_path / "conf.yaml", tmp_path / "absent.env"
    assert {f"BASIC_MODEL = users-model  ({conf_path})", f"OPENAI_API_KEY = ***  ({conf_path})",
            f"SEARCH_API = brave  ({env_path})", f"BRAVE_SEARCH_API_KEY = ***  ({env_path})",
            "LLM_MAX_CONCURRENCY = 3  (environment)", "SEARCH_MAX_CONCURRENCY = 4  (default)",
            "DEERFLOW_WEB_TOKENS = ann (own runs only)  (environment)", "DEERFLOW_CODEC_TOKEN = ***  (environment)",
            # named for what they count, not credentials: shown
            "DEERFLOW_RUN_TOKEN_BUDGET = 50000  (environment)", "LLM_MAX_OUTPUT_TOKENS = 4096  (default)"} <= set(lines)
    assert "secret" not in "\n".join(lines)
    code, lines = run(tmp_path, ["starter.py", "config"], conf=conf, ARK_KEY="ark-secret",
                      DEERFLOW_WEB_TOKENS='[{"name": "ann", "token": "short-secret"}]')  # too short: refused,
    assert code == 2 and "DEERFLOW_WEB_TOKENS.0.token=***" in lines[0] and "secret" not in lines[0]  # not echoed
    code, lines = run(tmp_path, ["starter.py", "config"], conf=conf, LLM_MAX_CONCURRENCY="3")  # $ARK_KEY unset
    assert (code, lines) == (2, [f"Error: {conf_path}: BASIC_MODEL.api_key: $ARK_KEY is not set in the environment "
                                 "or .env"])


def test_config_shows_the_temporal_target_and_each_token_holder_never_a_token(tmp_path: Path) -> None:
    tokens = ('[{"name": "ann", "token": "web-secret-of-ann-00", "role": "reviewer"},'
              ' {"name": "bob", "token": "web-secret-of-bob-00"}]')
    code, lines = run(tmp_path, ["starter.py", "config"], DEERFLOW_WEB_TOKENS=tokens, TEMPORAL_NAMESPACE="research",
                      TEMPORAL_API_KEY="temporal-secret", DEERFLOW_WEB_TOKEN="operator-secret-0000")
    assert code == 0, lines
    assert lines[:4] == ["TEMPORAL_ADDRESS = 127.0.0.2:9  (environment)",
                         "TEMPORAL_NAMESPACE = research  (environment)",
                         "TEMPORAL_TLS = on", "TEMPORAL_API_KEY = ***"]  # an API key turns TLS on by itself
    assert "DEERFLOW_WEB_TOKENS = ann (reviewer), bob (own runs only)  (environment)" in lines
    assert "DEERFLOW_WEB_TOKEN = ***  (environment)" in lines
    assert "secret" not in "\n".join(lines)
    # A profile in the operator's TOML file, and no address at all: the embedded dev server's.
    profile = tmp_path / "temporal.toml"
    profile.write_text('[profile.prod]\naddress = "temporal.internal:7233"\nnamespace = "deep"\n')
    code, lines = run(tmp_path, ["starter.py", "config"], TEMPORAL_ADDRESS=None, TEMPORAL_CONFIG_FILE=str(profile),
                      TEMPORAL_PROFILE="prod")
    assert lines[:3] == ["TEMPORAL_ADDRESS = temporal.internal:7233  (profile prod)",
                         "TEMPORAL_NAMESPACE = deep  (profile prod)", "TEMPORAL_TLS = off"], lines
    code, lines = run(tmp_path, ["starter.py", "config"], TEMPORAL_ADDRESS=None,
                      DEERFLOW_EMBEDDED_ADDRESS="127.0.0.1:7399")
    assert lines[:2] == ["TEMPORAL_ADDRESS = 127.0.0.1:7399  (embedded dev server: DEERFLOW_EMBEDDED_ADDRESS)",
                         "TEMPORAL_NAMESPACE = default  (default)"], lines


@pytest.mark.parametrize("where", ["env", "conf"])
def test_an_invalid_role_is_named_in_one_line(tmp_path: Path, where: str) -> None:
    """It was masked with the token (``DEERFLOW_WEB_TOKENS.0.role=***``): the operator could not see what
    was wrong. The role is shown, the token still never is."""
    entry = {"name": "ann", "token": "web-secret-of-ann-00", "role": "boss"}
    if where == "env":
        code, lines = run(tmp_path, ["starter.py", "config"], DEERFLOW_WEB_TOKENS=json.dumps([entry]))
    else:
        code, lines = run(tmp_path, ["starter.py", "config"], conf=yaml.safe_dump({"WEB_TOKENS": [entry]}))
    assert (code, len(lines)) == (2, 1), lines
    assert "DEERFLOW_WEB_TOKENS.0.role='boss': Input should be 'reviewer', 'viewer' or 'admin'" in lines[0]
    assert "secret" not in lines[0]


SINGLE_TOKEN = "the-operators-own-token"


@pytest.mark.parametrize(("single", "named", "why"), [
    (SINGLE_TOKEN, [{"name": "operator", "token": "a-role-less-holders-token"}],
     "the name 'operator' is given to two tokens (DEERFLOW_WEB_TOKENS and DEERFLOW_WEB_TOKEN"),
    (SINGLE_TOKEN, [{"name": "vic", "token": SINGLE_TOKEN, "role": "viewer"}],
     "two holders have the same token (DEERFLOW_WEB_TOKENS or DEERFLOW_WEB_TOKEN)"),
    (None, [{"name": "ann", "token": "anns-token-0000000001"}, {"name": "ann", "token": "anns-token-0000000002",
                                                               "role": "admin"}],
     "the name 'ann' is given to two tokens (DEERFLOW_WEB_TOKENS)"),
    (None, [{"name": "ann", "token": "anns-token-0000000001"}, {"name": "bob", "token": "anns-token-0000000001",
                                                               "role": "admin"}],
     "two holders have the same token (DEERFLOW_WEB_TOKENS)"),
], ids=["operator-named-twice", "viewer-holds-the-single-token", "a-name-twice", "a-token-twice"])
def test_token_settings_that_contradict_themselves_stop_the_api_server(
        tmp_path: Path, single: str | None, named: list[dict[str, str]], why: str) -> None:
    """Issue #42 §4: these were accepted (exit 0), and the record could not tell the holders apart."""
    code, lines = run(tmp_path, ["starter.py", "serve", "--port", "9"], DEERFLOW_WEB_TOKENS=json.dumps(named),
                      **({"DEERFLOW_WEB_TOKEN": single} if single else {}))
    assert (code, len(lines)) == (2, 1), lines
    assert lines[0].startswith("Error: DEERFLOW_WEB_TOKENS=***: ") and why in lines[0], lines
    assert "token-0" not in lines[0] and SINGLE_TOKEN not in lines[0] and "holders-token" not in lines[0]


ENTRY_POINTS = {"worker": ["worker.py"], "cli": ["starter.py", "list"],
                "api-server": ["starter.py", "serve", "--port", "9"],
                "codec-server": ["starter.py", "codec-server", "--port", "9"]}
NINE_ALIASES_DEEP = "MCP_SERVERS:\n  bomb:\n    l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"    l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 9))
BROKEN_FILES: dict[str, tuple[str, bytes, str]] = {  # file, content, what the one line says
    "alias-bomb": ("conf.yaml", NINE_ALIASES_DEEP.encode(), "MCP_SERVERS.bomb.l1.0 (line 4, column 14): an alias"),
    "20000-deep": ("conf.yaml", b"MCP_SERVERS: " + b"[" * 20_000 + b"]" * 20_000, "nested deeper than 32 levels"),
    "python-tag": ("conf.yaml", b"BASIC_MODEL: !!python/object:os.system {}\n", "the tag !!python/object:os.system"),
    "unclosed-list": ("conf.yaml", b"RESOURCE_ROOTS: [a, b\n", "RESOURCE_ROOTS (line 2, column 1): expected"),
    "non-utf8-conf": ("conf.yaml", b"BASIC_MODEL:\n  model: caf\xe9\n", "line 2 (model): byte 0xe9 is not UTF-8"),
    "non-utf8-env": ("absent.env", b"LOG_LEVEL=caf\xe9\n", "line 1 (LOG_LEVEL): byte 0xe9 is not UTF-8"),
    # Each line twice the one before: 8 GB by line 31, built by python-dotenv before anything could refuse it.
    "env-doubling": ("absent.env", ("A=xxxxxxxx\nL0=${A}${A}\n" + "".join(
        f"L{n}=${{L{n - 1}}}${{L{n - 1}}}\n" for n in range(1, 40))).encode(),
        "line 17 (L15): its ${…} variables expand the file past 1,000,000 characters"),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("case", BROKEN_FILES)
def test_a_broken_file_is_one_line_naming_it_in_every_entry_point(tmp_path: Path, case: str, entry: str) -> None:
    """Issue #42 §5: each was a traceback and exit 1, and the alias bomb and the doubling .env hung every
    entry point."""
    name, content, says = BROKEN_FILES[case]
    (tmp_path / name).write_bytes(content)
    code, lines = run(tmp_path, ENTRY_POINTS[entry])
    assert (code, len(lines)) == (2, 1), lines
    assert f"{tmp_path / name}: " in lines[0] and says in lines[0], lines


SECRET = "sk-CANARY-0123456789abcdef"


@pytest.mark.parametrize("entry", ["worker", "cli"])
def test_a_secret_put_into_a_setting_that_is_not_one_is_masked_in_the_error(tmp_path: Path, entry: str) -> None:
    """Issue #42 §5: ``Error: LOG_LEVEL='SK-…'`` from starter.py, and the same in the worker's log."""
    (tmp_path / "absent.env").write_text(f"OPENAI_API_KEY={SECRET}\nLOG_LEVEL=${{OPENAI_API_KEY}}\n")
    code, lines = run(tmp_path, ENTRY_POINTS[entry], conf="BASIC_MODEL:\n  max_retries: $ARK_KEY\n", ARK_KEY=SECRET)
    assert code == 2 and len(lines) == 2, lines
    assert "LOG_LEVEL=***: Input should be 'DEBUG'" in "\n".join(lines) and "LLM_MAX_RETRIES=***" in "\n".join(lines)
    assert SECRET.lower() not in "\n".join(lines).lower()


def test_a_key_used_as_the_model_name_is_masked_by_config(tmp_path: Path) -> None:
    code, lines = run(tmp_path, ["starter.py", "config"], conf="BASIC_MODEL:\n  model: $OPENAI_API_KEY\n",
                      OPENAI_API_KEY=SECRET)
    assert code == 0, lines
    assert f"BASIC_MODEL = ***  ({tmp_path / 'conf.yaml'})" in lines
    assert SECRET not in "\n".join(lines)


def test_dot_envs_variables_are_filled_as_load_settings_fills_them_environment_first(tmp_path: Path) -> None:
    """python-dotenv filled ``${LEVEL}`` from the file's earlier line over the environment (and, in
    ``load_settings(environ=…)``, from the process's environment, not the variables given): the CLI and
    a caller with the same variables read two different settings. The environment wins, as for every
    setting and in DeerFlow's ``load_dotenv``; a variable of the process is not seen where not given."""
    from config.settings import load_settings

    env_file = tmp_path / "absent.env"
    env_file.write_text("LEVEL=warning\nLOG_LEVEL=${LEVEL}\nLLM_MAX_CONCURRENCY=${CONCURRENCY:-7}\n")
    code, lines = run(tmp_path, ["starter.py", "config"], LEVEL="debug", CONCURRENCY="3")
    assert code == 0, lines
    assert {f"LOG_LEVEL = DEBUG  ({env_file})", f"LLM_MAX_CONCURRENCY = 3  ({env_file})"} <= set(lines), lines
    given = load_settings({"DEERFLOW_ENV_FILE": str(env_file), "DEERFLOW_CONF": str(tmp_path / "absent.yaml"),
                           "LEVEL": "debug", "CONCURRENCY": "3"})
    assert (given.log_level, given.llm_max_concurrency) == ("DEBUG", 3)
