"""Settings are built once, by each process's entry point, from the environment it is handed.

``load_settings`` is the only reader of the environment and ``conf.yaml``; the offline providers
say which settings point at them instead of rewriting the environment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from config.settings import ConfigError, Settings, load_settings
from offline.providers import start_offline_providers


def test_env_wins_over_conf_yaml_and_an_empty_variable_is_unset(tmp_path: Path) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text("BASIC_MODEL:\n  model: from-conf\n  base_url: http://127.0.0.1:9/v1\nREASONING_MODEL:\n"
                    "  model: thinker\n")
    settings = load_settings(environ={"DEERFLOW_CONF": str(conf), "BASIC_MODEL": "from-env", "REASONING_MODEL": ""})
    assert (settings.basic_model, settings.reasoning_model) == ("from-env", "thinker")
    assert settings.openai_base_url == "http://127.0.0.1:9/v1"
    assert load_settings(environ={}, conf_path=conf).basic_model == "from-conf"  # conf_path beats DEERFLOW_CONF


def test_only_the_environ_given_is_read(tmp_path: Path) -> None:
    assert load_settings(environ={"DEERFLOW_CONF": str(tmp_path / "absent.yaml")}).openai_api_key is None


def test_offline_providers_hand_back_settings_and_leave_the_environment_alone() -> None:
    environ = {"SEARCH_API": "tavily"}
    providers = start_offline_providers(load_settings(environ))
    try:
        assert environ == {"SEARCH_API": "tavily"}
        assert providers.model is not None and providers.search is not None
        settings = load_settings(environ={**environ, **providers.overrides})
        assert settings.openai_base_url == providers.model.base_url and settings.offline_demo
        assert settings.tavily_base_url == providers.search.base_url
    finally:
        providers.stop()


def test_offline_providers_serve_only_what_has_no_key() -> None:
    providers = start_offline_providers(load_settings({"OPENAI_API_KEY": "sk-real", "SEARCH_API": "brave"}))
    assert (providers.model, providers.search, providers.overrides) == (None, None, {})


@pytest.mark.parametrize("value", ['["http://localhost:3000"]', "http://localhost:3000/chat", "localhost:3000",
                                   "http://localhost:3000,ftp://x"])
def test_an_allowed_origin_that_no_browser_sends_is_refused_by_name(value: str) -> None:
    # A JSON list was once split on its comma into two origins no browser sends: the UI was refused.
    with pytest.raises(ConfigError, match="DEERFLOW_WEB_ALLOWED_ORIGINS"):
        load_settings({"DEERFLOW_WEB_ALLOWED_ORIGINS": value})


@pytest.mark.parametrize(("value", "accepted"),
                         [("0", True), ("0.5", False), ("4.9", False), ("5", True), ("60", True)])
def test_a_stall_watchdog_is_off_or_slower_than_a_loaded_hosts_lag(value: str, accepted: bool) -> None:
    if accepted:
        assert load_settings({"DEERFLOW_WORKER_STALL_SECONDS": value}).worker_stall_seconds == float(value)
    else:
        with pytest.raises(ConfigError, match=r"DEERFLOW_WORKER_STALL_SECONDS.*0 \(never\) or at least 5 seconds"):
            load_settings({"DEERFLOW_WORKER_STALL_SECONDS": value})


def test_allowed_origins_are_a_comma_separated_list() -> None:
    origins = load_settings({"DEERFLOW_WEB_ALLOWED_ORIGINS": "http://localhost:3000/, http://[::1]:3001"})
    assert origins.web_allowed_origins == ["http://localhost:3000", "http://[::1]:3001"]


def test_every_groups_list_settings_are_split_once_composed() -> None:
    """Each group splits its own comma-separated lists; composed into one ``Settings``, none is lost."""
    settings = load_settings(environ={"DEERFLOW_CRAWL_ALLOW_HOSTS": "Wiki.Test, 10.0.0.0/8",
                                      "DEERFLOW_MCP_ALLOW_HOSTS": "MCP.Test", "SEARCH_INCLUDE_DOMAINS": "A.Test",
                                      "DEERFLOW_SECRET_ENV_NAMES": "My_Key,Other"})
    assert settings.crawl_allow_hosts == ["wiki.test", "10.0.0.0/8"]
    assert settings.mcp_allow_hosts == ["mcp.test"]
    assert settings.search_include_domains == ["a.test"]
    assert settings.secret_env_names == ["My_Key", "Other"]


def test_no_two_settings_groups_name_a_validator_alike() -> None:
    """Pydantic keys validators by name, so a second group's ``_split_hosts`` would hide the first's."""
    composed = Settings.__pydantic_decorators__.field_validators
    assert len(composed) == sum(len(group.__pydantic_decorators__.field_validators) for group in Settings.__bases__)


def test_distinct_named_tokens_beside_the_single_one_are_accepted() -> None:
    settings = load_settings({"DEERFLOW_WEB_TOKEN": "o" * 20, "DEERFLOW_WEB_TOKENS": json.dumps(
        [{"name": "ann", "token": "a" * 20}, {"name": "bob", "token": "b" * 20, "role": "viewer"}])})
    assert [entry.name for entry in settings.web_tokens] == ["ann", "bob"] and settings.web_token == "o" * 20
    named_operator = load_settings({"DEERFLOW_WEB_TOKENS": json.dumps([{"name": "operator", "token": "a" * 20}])})
    assert [entry.name for entry in named_operator.web_tokens] == ["operator"]  # no DEERFLOW_WEB_TOKEN: no clash


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "-x"])
def test_a_token_name_is_never_a_folder_that_climbs_or_hides(name: str) -> None:
    """A token's uploads go to a folder named after it (server/uploads.py)."""
    with pytest.raises(ConfigError, match=r"DEERFLOW_WEB_TOKENS\.0\.name"):
        load_settings({"DEERFLOW_WEB_TOKENS": json.dumps([{"name": name, "token": "a" * 20}])})
