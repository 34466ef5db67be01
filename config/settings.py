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

from config.deerflow import TRUE_WORDS, ConfigError, conf_values, env_problems, read_env_file
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

    def loaded_from(self, variables: Mapping[str, str], sources: Mapping[str, str]) -> Settings:
        """These settings, remembering the variables and sources they were loaded from."""
        self._variables, self._sources = dict(variables), dict(sources)
        return self


def load_settings(environ: Mapping[str, str] | None = None, conf_path: Path | None = None,
                  env_file: Path | None = None) -> Settings:
    """Env vars win over ``.env`` (``env_file``, else ``DEERFLOW_ENV_FILE``, else ``./.env``), which
    wins over ``conf.yaml`` (``conf_path``, else ``DEERFLOW_CONF``, else ``./conf.yaml``).

    An empty variable counts as unset: compose's ``${VAR:-}`` produces them for every option the
    operator did not give. ``environ`` defaults to the process's environment. ``.env`` and
    ``conf.yaml`` are read as DeerFlow reads them (config/deerflow.py). Raises :class:`ConfigError`
    with one line per problem (a refused DeerFlow key, a bad value), never a traceback's worth.
    The settings remember the variables and sources they were loaded from (``Settings.sources``).
    """
    process_env = {name: value for name, value in (os.environ if environ is None else environ).items() if value}
    dotenv_path = (env_file or Path(process_env.get("DEERFLOW_ENV_FILE") or ".env")).absolute()
    dotenv = read_env_file(dotenv_path)
    env = {**dotenv, **process_env}
    variables = dict(env)
    problems = env_problems(env)
    conf_file = (conf_path or Path(env.get("DEERFLOW_CONF") or "conf.yaml")).absolute()
    try:
        conf = conf_values(conf_file, env)
    except ConfigError as error:
        problems += error.problems
        conf = {}
    # DeerFlow's names for two of ours: its CORS list, and DEBUG=True for debug logging.
    aliases = {"DEERFLOW_WEB_ALLOWED_ORIGINS": "ALLOWED_ORIGINS", "LOG_LEVEL": "DEBUG"}
    if "ALLOWED_ORIGINS" in env and "DEERFLOW_WEB_ALLOWED_ORIGINS" not in env:
        env["DEERFLOW_WEB_ALLOWED_ORIGINS"] = env["ALLOWED_ORIGINS"]
    if env.get("DEBUG", "").strip().lower() in TRUE_WORDS and "LOG_LEVEL" not in env:
        env["LOG_LEVEL"] = "DEBUG"
    env_names = {field.alias for field in Settings.model_fields.values() if field.alias}
    from_env = {name: env[name] for name in env_names if env.get(name)}

    def origin(name: str) -> str | None:
        return "environment" if name in process_env else str(dotenv_path) if name in dotenv else None

    sources = {**dict.fromkeys(conf, str(conf_file)),
               **{name: origin(name) or f"{origin(aliases[name])} (as {aliases[name]})" for name in from_env}}
    try:
        files = {"DEERFLOW_CONF": conf_file, "DEERFLOW_ENV_FILE": dotenv_path}  # the ones read, absolute
        settings = Settings(**{**conf, **from_env, **files}).loaded_from(variables, sources)
    except ValidationError as error:
        problems += validation_problems(error)
    if problems:
        raise ConfigError(problems)
    return settings


# The last word of a credential's name. A word anywhere else says what is counted or configured, not
# that the value is secret: TOKEN_LIMIT, DEERFLOW_RUN_TOKEN_BUDGET, DEERFLOW_TOKEN_STREAM_URL, and a
# KEY_FILE is a path. Masking those would hide from ``starter.py config`` what an operator checks.
_SECRET_LAST_WORDS = frozenset({"KEY", "KEYS", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"})
_SECRET_NAMES = frozenset({"DEERFLOW_WEB_TOKENS"})  # named API tokens; other names ending in TOKENS count
# The parts of a secret table that say who holds what, not the credential: a named token's name and role
# are shown (``starter.py config``, a refused ``role: boss``); its token never is.
_PUBLIC_FIELDS = {"DEERFLOW_WEB_TOKENS": frozenset({"NAME", "ROLE"})}


def is_secret(name: str) -> bool:
    """Whether the setting ``name`` (or a part of it: ``DEERFLOW_WEB_TOKENS.0.token``) holds a
    credential, never printed."""
    parts = name.upper().split(".")
    if len(parts) == 3 and parts[1].isdigit() and parts[2] in _PUBLIC_FIELDS.get(parts[0], ()):
        return False
    return any(part.rsplit("_", 1)[-1] in _SECRET_LAST_WORDS or part in _SECRET_NAMES for part in parts)


def validation_problems(error: ValidationError) -> list[str]:
    """One line per invalid value: the setting's env name, what is wrong, and the value given
    (masked for secrets)."""
    lines = []
    for problem in error.errors(include_url=False):
        name = ".".join(str(part) for part in problem["loc"]) or "settings"
        value = problem.get("input")
        shown = "***" if is_secret(name) else repr(value)[:80]
        message = str(problem["msg"]).removeprefix("Value error, ")
        lines.append(f"{name}={shown}: {message}")
    return lines

