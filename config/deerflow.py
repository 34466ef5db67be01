"""DeerFlow v1's ``conf.yaml`` and ``.env``, read as DeerFlow reads them, or refused by name.

A DeerFlow user brings files written for DeerFlow (branch ``main-1.x``: ``conf.yaml.example``,
``.env.example``, ``src/config/loader.py``). Each key there is either mapped onto our settings'
env names with DeerFlow's meaning (``$VAR`` values expanded from the environment, each model
block's own endpoint and key, ``verify_ssl``, ``max_retries``, the search engine and its domain
filters), or refused with one line naming the key and what to use instead: a key accepted and
then ignored would make a run do something other than what its operator configured, while its
output still looks plausible.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from config.config_files import MAX_EXPANDED_CHARS, ConfigError, read_conf_yaml
from config.secrets import MASK, is_secret, known_secrets

# conf.yaml's blocks that DeerFlow's ``__`` environment form (``BASIC_MODEL__api_key``) may fill in.
NESTED_BLOCKS = ("BASIC_MODEL", "REASONING_MODEL", "SEARCH_ENGINE")
_NESTED_ENV = re.compile(rf"^({'|'.join(NESTED_BLOCKS)})__([A-Za-z_]+)$")

# Each model block's keys, by our env name, per block.
MODEL_KEYS: dict[str, dict[str, str]] = {
    "BASIC_MODEL": {"base_url": "OPENAI_BASE_URL", "api_key": "OPENAI_API_KEY", "model": "BASIC_MODEL",
                    "token_limit": "TOKEN_LIMIT", "verify_ssl": "LLM_VERIFY_SSL", "max_retries": "LLM_MAX_RETRIES"},
    "REASONING_MODEL": {"base_url": "REASONING_BASE_URL", "api_key": "REASONING_API_KEY",
                        "model": "REASONING_MODEL", "verify_ssl": "REASONING_VERIFY_SSL",
                        "max_retries": "REASONING_MAX_RETRIES"},
}
MODEL_REFUSED = {
    "platform": "only OpenAI-compatible endpoints are supported: give base_url, model and api_key",
    "token_limit": "one context window is configured for both models: use BASIC_MODEL.token_limit or TOKEN_LIMIT",
}
SEARCH_ENGINE_KEYS = {"include_domains": "SEARCH_INCLUDE_DOMAINS", "exclude_domains": "SEARCH_EXCLUDE_DOMAINS",
                      "max_content_length_per_page": "SEARCH_CONTENT_CHARS"}
# Our own top-level conf.yaml keys, by env name.
OWN_KEYS = {"RESOURCE_ROOTS": "DEERFLOW_RESOURCE_ROOTS", "MCP_SERVERS": "MCP_SERVERS",
            "WEB_TOKENS": "DEERFLOW_WEB_TOKENS"}

# DeerFlow's SEARCH_API names that differ from ours.
SEARCH_API_NAMES = {"brave_search": "brave"}

# DeerFlow's .env keys that have no counterpart here, and what to do instead. A prefix ending in
# "_" covers a family (one RAG provider's settings).
_REMOVE = "; remove it"
REFUSED_ENV: dict[str, str] = {
    "INFOQUEST_API_KEY": "InfoQuest is not a search provider here: use SEARCH_API=tavily, brave_search, "
                         "duckduckgo, serper, searx, arxiv or wikipedia" + _REMOVE,
    "JINA_API_KEY": "pages are fetched by the built-in crawler, not Jina" + _REMOVE,
    "LANGSMITH_": "tracing here is OpenTelemetry: set OTEL_EXPORTER_OTLP_ENDPOINT instead",
    "LANGCHAIN_VERBOSE": "model requests are logged by the worker's logging, not LangChain's" + _REMOVE,
    "LANGCHAIN_DEBUG": "model requests are logged by the worker's logging, not LangChain's" + _REMOVE,
    "LANGGRAPH_CHECKPOINT_": "runs are durable in Temporal, which keeps every run's state" + _REMOVE,
    "VOLCENGINE_TTS_VOICE_TYPE": "the podcast speaks with DeerFlow's own voice per speaker (BV002 male, BV001 "
                                 "female); another voice needs DEERFLOW_TTS_URL" + _REMOVE,
    "RAGFLOW_RETRIEVAL_SIZE": "not supported here" + _REMOVE,
    "RAGFLOW_CROSS_LANGUAGES": "not supported here" + _REMOVE,
    **{prefix: "only RAG_PROVIDER=local or ragflow is supported" + _REMOVE
       for prefix in ("VIKINGDB_", "DIFY_", "MOI_", "MILVUS_", "QDRANT_")},
}
TRUE_WORDS = frozenset({"1", "true", "yes", "y", "on"})
# Keys refused only with these values: DeerFlow's defaults are what happens here anyway.
REFUSED_VALUES: dict[str, tuple[set[str], str]] = {
    "ENABLE_MCP_SERVER_CONFIGURATION": (
        set(TRUE_WORDS),
        "MCP servers come only from the operator's MCP_SERVERS (conf.yaml); requests pick them by name"),
    "ENABLE_PYTHON_REPL": (
        {"0", "false", "no", "n", "off"},
        "the coder's Python always runs contained in the sandbox (DEERFLOW_SANDBOX_MODE=isolated)" + _REMOVE),
}
# DeerFlow keys honoured as they are, outside our settings: the web front end's build argument
# and the deployment name, which the backend never reads in DeerFlow either.
PASSED_THROUGH = {"NEXT_PUBLIC_API_URL", "APP_ENV"}


def env_problems(env: Mapping[str, str], origin: Callable[[str], str | None]) -> list[str]:
    """One line per DeerFlow variable in ``env`` that means something this project does not do, with
    where it was set (``origin``: the environment or the ``.env`` file)."""
    problems = []
    for name, value in sorted(env.items()):
        if not value:
            continue
        reason = next((why for key, why in REFUSED_ENV.items()
                       if name == key or (key.endswith("_") and name.startswith(key))), None)
        if name in REFUSED_VALUES and value.strip().lower() in REFUSED_VALUES[name][0]:
            reason = REFUSED_VALUES[name][1]
        if name == "RAG_PROVIDER" and value not in ("local", "ragflow"):
            reason = "only RAG_PROVIDER=local or ragflow is supported"
        if reason:
            problems.append(f"{name}={MASK if is_secret(name) else value}: {reason} ({origin(name)})")
    return problems


def conf_values(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """DeerFlow's ``conf.yaml`` at ``path`` as our settings by env name, with ``$VAR`` values from
    ``env`` and the ``BLOCK__key`` variables of ``env`` over the file's blocks.

    Raises :class:`ConfigError` listing every key that is refused and every ``$VAR`` that is unset.
    """
    data = read_conf_yaml(path) or {}
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: not a mapping of settings"])
    for name, value in env.items():
        if (match := _NESTED_ENV.match(name)) and value:
            block = data.setdefault(match.group(1), {})
            if isinstance(block, dict):
                block[match.group(2).lower()] = value
    data = _Expansion(path, env, problems).expand(data)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in MODEL_KEYS:
            _model_block(key, value, values, problems)
        elif key == "SEARCH_ENGINE":
            _search_engine(value, values, problems)
        elif key == "ENABLE_WEB_SEARCH":
            if value is not True:
                problems.append("ENABLE_WEB_SEARCH: web search is chosen per run here (the request's "
                                "enable_web_search, default true); remove it")
        elif key in OWN_KEYS:
            if value:
                values[OWN_KEYS[key]] = value
        elif key == "CRAWLER_ENGINE":
            problems.append("CRAWLER_ENGINE: pages are fetched by the built-in crawler "
                            "(DEERFLOW_CRAWL_MAX_CHARS, DEERFLOW_CRAWL_ALLOW_HOSTS); remove it")
        elif key == "TOOL_INTERRUPTS":
            problems.append("TOOL_INTERRUPTS: interrupting before a tool is not supported; "
                            "review the plan instead (auto_accept_plan=false); remove it")
        else:
            problems.append(f"{key}: not a conf.yaml setting here (see docs/configuration/reference.md); remove it")
    if problems:  # a secret of the file's own (a literal api_key) is masked here, where it is known
        secrets = known_secrets(env, values)
        raise ConfigError([secrets.mask(f"{path}: {problem}") for problem in problems])
    return values


class _Expansion:
    """DeerFlow's ``replace_env_vars``: a string value ``$NAME`` is the variable's value. Unlike DeerFlow
    (which then sends the bare name as the value), an unset variable is refused. What the variables put
    into the document is counted as they are put: a value named in many places is walked in each (the
    secrets are looked for in every string), so past ``MAX_EXPANDED_CHARS`` the file is refused."""

    def __init__(self, path: Path, env: Mapping[str, str], problems: list[str]) -> None:
        self.path, self.env, self.problems, self.left = path, env, problems, MAX_EXPANDED_CHARS

    def expand(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {name: self.expand(item, f"{key}.{name}" if key else str(name)) for name, item in value.items()}
        if isinstance(value, list):  # our own keys hold lists of tables (WEB_TOKENS: each token a $VAR)
            return [self.expand(item, f"{key}.{index}") for index, item in enumerate(value)]
        if isinstance(value, str) and value.startswith("$"):
            found = self.env.get(value[1:])
            if not found:
                self.problems.append(f"{key}: {value} is not set in the environment or .env")
                return None
            self.left -= len(found)
            if self.left < 0:
                raise ConfigError([f"{self.path}: {key}: {value} and the variables before it put more than "
                                   f"{MAX_EXPANDED_CHARS:,} characters into the file; write the values out"])
            return found
        return value


def _model_block(block: str, value: Any, values: dict[str, Any], problems: list[str]) -> None:
    if not isinstance(value, dict):
        problems.append(f"{block}: a mapping of base_url, model, api_key, ... is expected")
        return
    keys = MODEL_KEYS[block]
    for name, item in value.items():
        if name in keys:
            if item is not None and item != "":
                values[keys[name]] = item
        elif name in MODEL_REFUSED:
            problems.append(f"{block}.{name}: {MODEL_REFUSED[name]}")
        else:
            problems.append(f"{block}.{name}: unknown key; use {', '.join(keys)}")


def _search_engine(value: Any, values: dict[str, Any], problems: list[str]) -> None:
    if not isinstance(value, dict):
        problems.append("SEARCH_ENGINE: a mapping of engine, include_domains, exclude_domains is expected")
        return
    for name, item in value.items():
        if name == "engine":
            if item == "tavily":
                values["SEARCH_API"] = "tavily"
            else:
                problems.append(f"SEARCH_ENGINE.engine: {item!r} is not supported; use tavily, or SEARCH_API "
                                "for brave_search, duckduckgo, serper, searx, arxiv or wikipedia")
        elif name in SEARCH_ENGINE_KEYS:
            if item is not None and item != "":
                values[SEARCH_ENGINE_KEYS[name]] = item
        else:
            problems.append(f"SEARCH_ENGINE.{name}: not supported here (supported: engine, "
                            f"{', '.join(SEARCH_ENGINE_KEYS)}); remove it")
