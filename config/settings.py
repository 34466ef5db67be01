"""The configuration: one pydantic settings object from env vars, ``.env`` and ``conf.yaml``.

Each process's entry point (worker, CLI, bench, tests) calls :func:`load_settings` once and hands
the result to what needs it: activity objects, the payload store, the CLI. Nothing reads the
environment later, so a value is never passed along by rewriting it, and a test builds the
``Settings`` it wants instead of patching variables. Secrets live here and only here; they never
enter workflow inputs or history.

The fields are declared by concern in :mod:`config.groups` (model, search, crawl, MCP, worker,
sandbox, storage, web, speech, telemetry); :class:`Settings` composes them into one flat object,
so ``settings.x`` and every env name read the same as before the grouping.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import PrivateAttr, ValidationError

from config.config_files import ConfigError
from config.deerflow import TRUE_WORDS, conf_values, env_problems
from config.env_file import read_env_file
from config.groups.crawl import CrawlSettings
from config.groups.mcp import McpSettings
from config.groups.model import ModelSettings
from config.groups.sandbox import SandboxSettings
from config.groups.search import SearchSettings
from config.groups.speech import SpeechSettings
from config.groups.storage import StorageSettings
from config.groups.telemetry import TelemetrySettings
from config.groups.web import WebSettings
from config.groups.worker import WorkerSettings
from config.secrets import MASK, Secrets, is_secret, known_secrets


class Settings(  # pydantic lists the last base's fields first: the model group leads (``starter.py config``)
    TelemetrySettings,
    SpeechSettings,
    WebSettings,
    StorageSettings,
    SandboxSettings,
    WorkerSettings,
    McpSettings,
    CrawlSettings,
    SearchSettings,
    ModelSettings,
):
    """Built by ``load_settings`` from env, ``.env`` and conf.yaml; fields are named by their env vars."""

    _variables: dict[str, str] = PrivateAttr(default_factory=dict)
    _sources: dict[str, str] = PrivateAttr(default_factory=dict)
    _secrets: Secrets = PrivateAttr(default_factory=Secrets)
    _masked: frozenset[str] = PrivateAttr(default_factory=frozenset)

    def variables(self) -> Mapping[str, str]:
        """The variables these settings were loaded from (the environment over ``.env``; none for
        settings built directly). What MCP servers' ``${VAR}`` placeholders and the secret scrubber
        read, so that a value in ``.env`` counts there as everywhere else and nothing reads the
        process's environment a second time."""
        return self._variables

    def sources(self) -> Mapping[str, str]:
        """Where each value given came from, by env name: "environment", the ``.env`` file's path or
        the ``conf.yaml`` file's path (a name absent: the default). ``starter.py config`` shows them."""
        return self._sources

    def shown(self, name: str, text: str) -> str:
        """The setting ``name``'s value ``text`` as a message or a page may show it: masked whole if
        the setting is a credential, or the value given for it held a secret (config/secrets.py)."""
        return MASK if is_secret(name) or name in self._masked or self._secrets.holds(text) else text

    def masked(self, text: str) -> str:
        """``text`` about this configuration with every secret value in it masked."""
        return self._secrets.mask(text)

    def loaded_from(self, variables: Mapping[str, str], sources: Mapping[str, str], secrets: Secrets | None = None,
                    masked: frozenset[str] = frozenset()) -> Settings:
        """These settings, remembering the variables and sources they were loaded from, the secrets
        among those values, and the settings whose value given held one."""
        self._variables, self._sources = dict(variables), dict(sources)
        self._secrets, self._masked = secrets or Secrets(), masked
        return self


def load_settings(environ: Mapping[str, str] | None = None, conf_path: Path | None = None,
                  env_file: Path | None = None) -> Settings:
    """Env vars win over ``.env`` (``env_file``, else ``DEERFLOW_ENV_FILE``, else ``./.env``), which
    wins over ``conf.yaml`` (``conf_path``, else ``DEERFLOW_CONF``, else ``./conf.yaml``).

    An empty variable counts as unset: compose's ``${VAR:-}`` produces them for every option the
    operator did not give. ``environ`` defaults to the process's environment. ``.env`` and
    ``conf.yaml`` are read as DeerFlow reads them (config/env_file.py, config/deerflow.py,
    config/config_files.py).
    Raises :class:`ConfigError` with one line per problem (an unreadable file, a refused DeerFlow
    key, a bad value), each naming the setting and where it came from, never a traceback's worth,
    and never showing a secret (config/secrets.py). The settings remember the variables and sources
    they were loaded from (``Settings.sources``).
    """
    process_env = {name: value for name, value in (os.environ if environ is None else environ).items() if value}
    defaults = Settings.model_fields  # ./.env and ./conf.yaml (the suite's are its own: tests/support/isolation.py)
    dotenv_path = (env_file or Path(process_env.get("DEERFLOW_ENV_FILE") or defaults["env_file"].default)).absolute()
    problems: list[str] = []
    try:
        dotenv = read_env_file(dotenv_path, process_env)
    except ConfigError as error:
        problems, dotenv = error.problems, {}
    env = {**dotenv, **process_env}
    variables = dict(env)

    def origin(name: str) -> str | None:
        return "environment" if name in process_env else str(dotenv_path) if name in dotenv else None

    problems += env_problems(env, origin)
    conf_file = (conf_path or Path(env.get("DEERFLOW_CONF") or defaults["conf_path"].default)).absolute()
    try:
        conf = conf_values(conf_file, env)
    except ConfigError as error:
        problems += error.problems
        conf = {}
    aliases = _deerflow_aliases(env)
    env_names = {field.alias for field in Settings.model_fields.values() if field.alias}
    from_env = {name: env[name] for name in env_names if env.get(name)}
    sources = {**dict.fromkeys(conf, str(conf_file)),
               **{name: origin(name) or f"{origin(aliases[name])} (as {aliases[name]})" for name in from_env}}
    given = {**conf, **from_env}
    secrets = known_secrets(variables, given)
    masked = frozenset(name for name, value in given.items() if secrets.holds(value))
    try:
        files = {"DEERFLOW_CONF": conf_file, "DEERFLOW_ENV_FILE": dotenv_path}  # the ones read, absolute
        settings = Settings(**{**given, **files}).loaded_from(variables, sources, secrets, masked)
    except ValidationError as error:
        problems += validation_problems(error, sources, secrets, masked)
    if problems:
        raise ConfigError([secrets.mask(problem) for problem in problems])
    return settings


def _deerflow_aliases(env: dict[str, str]) -> dict[str, str]:
    """DeerFlow's names for two of ours, its CORS list and DEBUG=True for debug logging, put in
    ``env`` under ours unless ours is set; by our name."""
    if "ALLOWED_ORIGINS" in env and "DEERFLOW_WEB_ALLOWED_ORIGINS" not in env:
        env["DEERFLOW_WEB_ALLOWED_ORIGINS"] = env["ALLOWED_ORIGINS"]
    if env.get("DEBUG", "").strip().lower() in TRUE_WORDS and "LOG_LEVEL" not in env:
        env["LOG_LEVEL"] = "DEBUG"
    return {"DEERFLOW_WEB_ALLOWED_ORIGINS": "ALLOWED_ORIGINS", "LOG_LEVEL": "DEBUG"}


def validation_problems(error: ValidationError, sources: Mapping[str, str] | None = None,
                        secrets: Secrets | None = None, masked: frozenset[str] = frozenset()) -> list[str]:
    """One line per invalid value: the setting's env name, the value given (masked for secrets, for
    values holding one, and for settings whose value given held one: a validator may have changed its
    case), what is wrong, and where the value came from."""
    sources, secrets = sources or {}, secrets or Secrets()
    lines = []
    for problem in error.errors(include_url=False):
        name = ".".join(str(part) for part in problem["loc"]) or "settings"
        setting = str(problem["loc"][0]) if problem["loc"] else name
        value = problem.get("input")
        hidden = is_secret(name) or secrets.holds(value) or (name == setting and setting in masked)
        shown = MASK if hidden else repr(value)[:80]
        message = str(problem["msg"]).removeprefix("Value error, ")
        lines.append(f"{name}={shown}: {message} ({sources.get(setting, 'default')})")
    return lines
