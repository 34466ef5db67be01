"""DeerFlow v1's ``conf.yaml`` and ``.env`` (branch main-1.x), in DeerFlow's own shapes: each key is
honoured with DeerFlow's meaning or refused with one line naming it (issue #21)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model.clients import build_client
from activities.model.context_window import ContextWindows
from activities.model.llm import ModelActivities
from config.settings import ConfigError, load_settings
from offline.model_server import FakeModelServer
from offline.providers import OFFLINE_SEARCH_BANNER, offline_banner, offline_parts
from tests.support.chat_requests import COORDINATOR
from tests.support.tls_proxy import make_pki, serve_over_tls

# DeerFlow's conf.yaml.example with every commented option uncommented (the Google block aside).
DEERFLOW_CONF = """\
BASIC_MODEL:
  base_url: http://127.0.0.1:9/v3
  model: "doubao-1-5-pro-32k-250115"
  api_key: $ARK_API_KEY
  max_retries: 3
  verify_ssl: false
  token_limit: 200000

REASONING_MODEL:
  base_url: http://127.0.0.2:9/v3
  model: "doubao-1-5-thinking-pro-m-250428"
  api_key: $THINK_KEY
  max_retries: 2

ENABLE_WEB_SEARCH: true

SEARCH_ENGINE:
  engine: tavily
  include_domains:
    - example.com
    - gov.cn
  exclude_domains:
    - spam.example
  max_content_length_per_page: 4000
"""


def _conf(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "conf.yaml"
    path.write_text(text)
    return {"DEERFLOW_CONF": str(path), "DEERFLOW_ENV_FILE": str(tmp_path / "absent.env")}


def test_a_deerflow_conf_yaml_is_honoured_key_by_key(tmp_path: Path) -> None:
    settings = load_settings({**_conf(tmp_path, DEERFLOW_CONF), "ARK_API_KEY": "ark-secret", "THINK_KEY": "think"})
    basic, reasoning = settings.model_endpoint("basic"), settings.model_endpoint("reasoning")
    assert (basic.base_url, basic.api_key, basic.verify_ssl, basic.max_retries) == (
        "http://127.0.0.1:9/v3", "ark-secret", False, 3)
    # The reasoning model's own endpoint and key; verify_ssl it does not give is the basic model's.
    assert (reasoning.base_url, reasoning.api_key, reasoning.verify_ssl, reasoning.max_retries) == (
        "http://127.0.0.2:9/v3", "think", False, 2)
    assert settings.model_name("reasoning") == "doubao-1-5-thinking-pro-m-250428"
    assert settings.token_limit == 200000 and settings.search_content_chars == 4000
    assert settings.search_include_domains == ["example.com", "gov.cn"]
    assert settings.search_exclude_domains == ["spam.example"]
    assert offline_parts(settings) == (False, True)  # the model is configured: no demonstration model


def test_the_model_clients_use_each_blocks_endpoint_key_and_tls_choice(tmp_path: Path) -> None:
    settings = load_settings({**_conf(tmp_path, DEERFLOW_CONF), "ARK_API_KEY": "ark-secret", "THINK_KEY": "think"})
    basic, reasoning = build_client(settings, "basic", 100), build_client(settings, "reasoning", 100)
    assert str(basic.openai_api_base) == "http://127.0.0.1:9/v3"
    assert basic.openai_api_key is not None and basic.openai_api_key.get_secret_value() == "ark-secret"
    assert str(reasoning.openai_api_base) == "http://127.0.0.2:9/v3"
    assert reasoning.openai_api_key is not None and reasoning.openai_api_key.get_secret_value() == "think"
    assert basic.max_retries == 3 and reasoning.max_retries == 2
    assert isinstance(basic.http_async_client, httpx.AsyncClient)  # verify_ssl: false has its own client
    verified = load_settings({**_conf(tmp_path, "BASIC_MODEL:\n  base_url: http://127.0.0.1:9/v1\n"),
                              "DEERFLOW_ENV_FILE": str(tmp_path / "absent.env")})
    assert build_client(verified, "basic", 100).http_async_client is None


def test_an_unset_dollar_variable_is_refused_not_sent_literally(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({**_conf(tmp_path, DEERFLOW_CONF), "THINK_KEY": "think"})
    assert caught.value.problems == [f"{tmp_path / 'conf.yaml'}: BASIC_MODEL.api_key: $ARK_API_KEY is not set "
                                     "in the environment or .env"]


def test_the_double_underscore_form_and_dot_env_fill_the_blocks(tmp_path: Path) -> None:
    env_file = tmp_path / "deerflow.env"
    env_file.write_text('BASIC_MODEL__base_url=http://127.0.0.1:9/v1\nARK_API_KEY="from-dotenv"\n'
                        "BASIC_MODEL__model=from-dotenv\n")
    conf = tmp_path / "conf.yaml"
    conf.write_text("BASIC_MODEL:\n  api_key: $ARK_API_KEY\n  model: from-conf\n")
    settings = load_settings({"DEERFLOW_CONF": str(conf), "DEERFLOW_ENV_FILE": str(env_file),
                              "BASIC_MODEL__model": "from-env"})
    assert settings.openai_base_url == "http://127.0.0.1:9/v1"
    assert settings.openai_api_key == "from-dotenv"  # $VAR resolved from .env, as DeerFlow's load_dotenv does
    assert settings.basic_model == "from-env"  # the environment wins over .env, which wins over conf.yaml
    assert offline_banner(settings) == OFFLINE_SEARCH_BANNER


def test_deerflow_search_names_are_ours_or_refused_at_start(tmp_path: Path) -> None:
    env = {"DEERFLOW_ENV_FILE": str(tmp_path / "absent.env"), "DEERFLOW_CONF": str(tmp_path / "absent.yaml")}
    assert load_settings({**env, "SEARCH_API": "brave_search"}).search_api == "brave"
    with pytest.raises(ConfigError) as caught:
        load_settings({**env, "SEARCH_API": "infoquest"})
    assert len(caught.value.problems) == 1 and caught.value.problems[0].startswith("SEARCH_API='infoquest': ")


def test_deerflow_env_example_keys_without_a_meaning_here_are_refused_one_line_each(tmp_path: Path) -> None:
    # DeerFlow's .env.example as shipped (its uncommented lines).
    env_file = tmp_path / ".env"
    env_file.write_text(
        'DEBUG=True\nAPP_ENV=development\nNEXT_PUBLIC_API_URL="http://localhost:8000/api"\n'
        "AGENT_RECURSION_LIMIT=30\nALLOWED_ORIGINS=http://localhost:3000\nENABLE_MCP_SERVER_CONFIGURATION=false\n"
        'ENABLE_PYTHON_REPL=false\nSEARCH_API=tavily\nTAVILY_API_KEY=tvly-xxx\nINFOQUEST_API_KEY="infoquest-xxx"\n'
        "VOLCENGINE_TTS_APPID=xxx\nVOLCENGINE_TTS_ACCESS_TOKEN=xxx\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"DEERFLOW_ENV_FILE": str(env_file), "DEERFLOW_CONF": str(tmp_path / "absent.yaml")})
    refused = [line.split("=", 1)[0] for line in caught.value.problems]
    assert refused == ["ENABLE_PYTHON_REPL", "INFOQUEST_API_KEY"]  # DEBUG and VOLCENGINE_TTS_* are honoured
    assert "infoquest-xxx" not in str(caught.value)  # a key's value is never echoed
    env_file.write_text("AGENT_RECURSION_LIMIT=30\nALLOWED_ORIGINS=http://localhost:3001\nSEARCH_API=tavily\n"
                        "APP_ENV=development\nDEBUG=False\nENABLE_PYTHON_REPL=true\n")
    settings = load_settings({"DEERFLOW_ENV_FILE": str(env_file), "DEERFLOW_CONF": str(tmp_path / "absent.yaml")})
    assert settings.agent_recursion_limit == 30
    assert settings.web_allowed_origins == ["http://localhost:3001"]  # DeerFlow's CORS list
    assert settings.log_level == "INFO"  # DEBUG=False
    env_file.write_text("DEBUG=True\nVOLCENGINE_TTS_APPID=app\nVOLCENGINE_TTS_ACCESS_TOKEN=tok\n")
    settings = load_settings({"DEERFLOW_ENV_FILE": str(env_file), "DEERFLOW_CONF": str(tmp_path / "absent.yaml")})
    assert settings.log_level == "DEBUG"  # DeerFlow's debug logging
    assert (settings.volcengine_tts_appid, settings.volcengine_tts_access_token) == ("app", "tok")  # podcast voice
    env_file.write_text("VOLCENGINE_TTS_VOICE_TYPE=BV700_V2_streaming\n")  # commented out in .env.example
    with pytest.raises(ConfigError) as caught:
        load_settings({"DEERFLOW_ENV_FILE": str(env_file), "DEERFLOW_CONF": str(tmp_path / "absent.yaml")})
    assert [line.split("=", 1)[0] for line in caught.value.problems] == ["VOLCENGINE_TTS_VOICE_TYPE"]


@pytest.mark.parametrize(("conf", "key"), [
    ("BASIC_MODEL:\n  platform: google_aistudio\n  model: gemini-2.5-flash\n", "BASIC_MODEL.platform"),
    ("REASONING_MODEL:\n  model: t\n  token_limit: 150000\n", "REASONING_MODEL.token_limit"),
    ("BASIC_MODEL:\n  model: m\n  temperature: 0.2\n", "BASIC_MODEL.temperature"),  # DeerFlow passes it on
    ("SEARCH_ENGINE:\n  engine: infoquest\n", "SEARCH_ENGINE.engine"),
    ("SEARCH_ENGINE:\n  search_depth: advanced\n", "SEARCH_ENGINE.search_depth"),
    ("CRAWLER_ENGINE:\n  engine: jina\n", "CRAWLER_ENGINE"),
    ("TOOL_INTERRUPTS:\n  interrupt_before: [db_tool]\n", "TOOL_INTERRUPTS"),
    ("ENABLE_WEB_SEARCH: false\n", "ENABLE_WEB_SEARCH"),
    ("SOMETHING_ELSE: 1\n", "SOMETHING_ELSE"),
])
def test_deerflow_conf_keys_without_a_meaning_here_are_refused_by_name(tmp_path: Path, conf: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(_conf(tmp_path, conf))
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith(f"{tmp_path / 'conf.yaml'}: {key}: ")


async def test_verify_ssl_false_reaches_a_self_signed_endpoint_and_true_refuses_it(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")  # the server's certificate is signed by a CA nobody trusts
    server = FakeModelServer(api_key="k")
    base_url = serve_over_tls(server, pki.server)
    with server:
        conf = f"BASIC_MODEL:\n  base_url: {base_url}\n  model: m\n  api_key: k\n  verify_ssl: false\n"
        unverified = load_settings(_conf(tmp_path, conf))
        response = await ActivityEnvironment().run(ModelActivities(unverified).chat, COORDINATOR)
        assert response.message.tool_calls and len(server.requests) == 1
        verified = load_settings(_conf(tmp_path, conf.replace("verify_ssl: false", "verify_ssl: true")))
        with pytest.raises(ApplicationError, match=r"(?i)certificate|connect"):
            await ActivityEnvironment().run(ModelActivities(verified).chat, COORDINATOR)
        assert len(server.requests) == 1


async def test_the_reasoning_models_window_is_asked_of_its_own_endpoint_with_its_own_key(tmp_path: Path) -> None:
    with FakeModelServer(api_key="basic-key", n_ctx=4000) as basic, \
            FakeModelServer(api_key="think-key", n_ctx=9000) as thinker:
        conf = (f"BASIC_MODEL:\n  base_url: {basic.base_url}\n  model: b\n  api_key: basic-key\n"
                f"REASONING_MODEL:\n  base_url: {thinker.base_url}\n  model: t\n  api_key: think-key\n")
        settings = load_settings(_conf(tmp_path, conf))
        windows = ContextWindows()
        assert await windows.window(settings, "t", "reasoning") == 9000
        assert await windows.window(settings, "b", "basic") == 4000


@pytest.mark.parametrize(("env", "configured"), [
    ({}, False),
    ({"OPENAI_API_KEY": "sk-x"}, True),
    ({"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}, True),  # a local server needs no key
    # compose's default endpoint without a key: the demo, never a keyless request to the internet
    ({"OPENAI_BASE_URL": "https://api.openai.com/v1/"}, False),
    ({"OPENAI_BASE_URL": "https://api.openai.com/v1", "OPENAI_API_KEY": "sk-x"}, True),
])
def test_a_model_is_configured_by_a_key_or_by_an_endpoint_of_the_operators(
        tmp_path: Path, env: dict[str, str], configured: bool) -> None:
    files = {"DEERFLOW_ENV_FILE": str(tmp_path / "absent.env"), "DEERFLOW_CONF": str(tmp_path / "absent.yaml")}
    assert load_settings({**files, **env}).model_configured() is configured


def test_named_api_tokens_come_from_conf_yaml_with_their_tokens_from_the_environment(tmp_path: Path) -> None:
    """An operator keeps the table in conf.yaml and the secrets in the environment (``$VAR``)."""
    (tmp_path / "conf.yaml").write_text(
        "WEB_TOKENS:\n  - {name: alice, token: $ALICE_TOKEN, role: reviewer}\n  - {name: bob, token: $BOB_TOKEN}\n")
    settings = load_settings(environ={"ALICE_TOKEN": "a" * 20, "BOB_TOKEN": "b" * 20},
                             conf_path=tmp_path / "conf.yaml", env_file=tmp_path / ".env")
    assert [(t.name, t.token, t.role) for t in settings.web_tokens] == [
        ("alice", "a" * 20, "reviewer"), ("bob", "b" * 20, None)]
