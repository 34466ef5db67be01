"""One configuration path (issue #21): each entry point loads the settings once and hands them down,
and nothing outside config/ reads the environment for configuration.

Why a test: a second path is how a model configured in conf.yaml was once replaced by the offline
demonstration model (the offline decision read the raw environment), and how a value set in ``.env``
can be honoured by one process and not by the next. The check reads the source (AST), so a new
``os.environ.get("X")`` or ``load_settings()`` deep in a library fails here, by file and line.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parent.parent
PACKAGES = ("activities", "cli", "config", "hosting", "offline", "runtime", "sandbox", "server", "storage",
            "workflows")

# The processes' entry points, each loading the settings exactly once: the worker, and the command
# line (every CLI command, the API server `starter.py serve` and the codec server
# `starter.py codec-server` are started by cli/main.py). Tests and benches are entry points too.
ENTRY_POINTS = ("worker.py", "cli/main.py")

# Where product code outside config/ may touch the process's environment, and why: process
# plumbing, not configuration.
PROCESS_PLUMBING = {
    "runtime/connection.py": "Temporal's own TEMPORAL_* variables and profile file, read by the SDK's "
                             "envconfig as Temporal's CLI reads them",
    "runtime/embedded.py": "the environment the processes a front door starts inherit (PATH, TEMPORAL_*, "
                           "the AWS chain), with where its settings files are",
    "activities/mcp/checks.py": "PATH, HOME and LANG for a stdio MCP server",
    "runtime/process_start.py": "pydantic's own PYDANTIC_DISABLE_PLUGINS, set for the process before it builds a model",
    "cli/command_client.py": "the command server's switch and folder (XDG_RUNTIME_DIR, TMPDIR), read before any "
                             "setting can load (loading them is what the server spares), and the environment "
                             "a command hands to the child that runs it",
    "cli/command_server.py": "the caller's environment, taken by the child that runs its command",
    "activities/support/tls.py": "whether SSL_CERT_FILE or SSL_CERT_DIR is set, which httpx2 reads itself where it "
                                 "trusts the environment: where neither is, its two verifying contexts are one",
}
ENVIRONMENT_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def product_files() -> list[Path]:
    files = [REPO_DIR / "worker.py", REPO_DIR / "starter.py"]
    return files + sorted(path for package in PACKAGES for path in (REPO_DIR / package).rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(REPO_DIR).as_posix()


def settings_loads(tree: ast.AST) -> list[int]:
    """The lines that call ``load_settings``, by name or as an attribute."""
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "load_settings")
        or (isinstance(node.func, ast.Attribute) and node.func.attr == "load_settings"))]


def environment_reads(tree: ast.AST) -> list[int]:
    """The lines that reach the process's environment: ``os.environ``, ``os.getenv`` (under any name
    ``os`` is imported as), or those names imported from ``os``."""
    modules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names if alias.name == "os"}

    def reaches(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in ENVIRONMENT_NAMES and isinstance(node.value, ast.Name) and node.value.id in modules
        if isinstance(node, ast.ImportFrom):
            return node.module == "os" and any(alias.name in ENVIRONMENT_NAMES for alias in node.names)
        return False

    return [node.lineno for node in ast.walk(tree) if reaches(node)]


def parsed() -> dict[str, ast.AST]:
    return {relative(path): ast.parse(path.read_text(encoding="utf-8")) for path in product_files()}


def test_only_the_entry_points_load_the_settings_each_once() -> None:
    loads = {name: settings_loads(tree) for name, tree in parsed().items()}
    offenders = {name: lines for name, lines in loads.items() if lines and name not in ENTRY_POINTS}
    assert offenders == {}, "hand the entry point's Settings down instead of loading them again"
    assert {name: len(loads[name]) for name in ENTRY_POINTS} == dict.fromkeys(ENTRY_POINTS, 1)


def test_nothing_outside_config_reads_the_environment_but_process_plumbing() -> None:
    reads = {name: environment_reads(tree) for name, tree in parsed().items() if not name.startswith("config/")}
    offenders = {name: lines for name, lines in reads.items() if lines and name not in PROCESS_PLUMBING}
    assert offenders == {}, "make it a setting (config/groups/) and read it from the Settings handed down"
    assert all(reads[name] for name in PROCESS_PLUMBING), "an exception that no longer reads: remove it"


def test_the_checks_see_every_way_of_reaching_the_environment() -> None:
    """The detectors themselves, on the forms a library might use."""
    code = ("import os\nimport os as system\nfrom os import getenv\n"
            "a = os.environ.get('A')\nb = system.getenv('B')\nc = {**os.environ}\nd = 'E' in os.environ\n"
            "from config import settings\ne = settings.load_settings()\nf = load_settings({})\n")
    tree = ast.parse(code)
    assert sorted(environment_reads(tree)) == [3, 4, 5, 6, 7]
    assert sorted(settings_loads(tree)) == [9, 10]


# ---------------------------------------------------------------- .env counts where the environment did


async def test_a_variable_in_dot_env_fills_mcp_placeholders_and_is_scrubbed(tmp_path: Path) -> None:
    """MCP's ``${VAR}`` and the secret scrubber used to read the process's environment alone."""
    from activities.guards.secret_scrubber import SecretScrubber
    from activities.mcp.checks import plan_connection
    from config.settings import load_settings

    dotenv = tmp_path / ".env"
    dotenv.write_text("MCP_DOTENV_TOKEN=t0ken-from-dot-env\n")
    server = {"transport": "streamable_http", "url": "http://127.0.0.1:9/mcp",
              "headers": {"Authorization": "Bearer ${MCP_DOTENV_TOKEN}"}}
    settings = load_settings({"DEERFLOW_ENV_FILE": str(dotenv), "DEERFLOW_CONF": str(tmp_path / "absent.yaml"),
                              "DEERFLOW_MCP_ALLOW_HOSTS": "127.0.0.1", "MCP_SERVERS": json.dumps({"web": server})})
    plan = await plan_connection("web", settings.mcp_servers["web"], settings)
    assert dict(plan.headers) == {"Authorization": "Bearer t0ken-from-dot-env"}
    assert SecretScrubber.for_settings(settings).scrub("said t0ken-from-dot-env") == "said [redacted]"


def test_the_processes_a_front_door_starts_read_its_conf_yaml_and_dot_env(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The background worker and codec server run in the repository: without the paths, they would
    read the repository's conf.yaml and .env, not those of the folder the command ran in."""
    from config.settings import load_settings
    from runtime.embedded import EmbeddedStack

    (tmp_path / "conf.yaml").write_text("BASIC_MODEL:\n  model: users-model\n")
    (tmp_path / ".env").write_text("SEARCH_API=duckduckgo\n")
    monkeypatch.chdir(tmp_path)  # the product's defaults, relative (the suite's: tests/support/isolation.py)
    settings = load_settings({"DEERFLOW_HOME": str(tmp_path / "home"), "DEERFLOW_CONF": "conf.yaml",
                              "DEERFLOW_ENV_FILE": ".env"})
    monkeypatch.chdir(REPO_DIR)
    child = load_settings(EmbeddedStack(settings).child_env())
    assert (child.basic_model, child.search_api, child.home) == ("users-model", "duckduckgo", tmp_path / "home")
