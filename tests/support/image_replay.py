"""The worker image, built as its Dockerfile says, without Docker (issue #22).

There is no Docker daemon in CI, so the build is replayed (``make deploy-test`` builds it with Docker):
exactly the build stage's COPY set into its WORKDIR goes into a clean directory, and the project is
installed from there (``pip install .``, as the stage's non-editable ``uv sync`` installs it) into a fresh
virtualenv. Dependencies are not downloaded again: the fresh virtualenv sees this interpreter's
site-packages as a plain path entry, so its ``.pth`` files (this checkout's editable install among
them) are not processed and the product's own code comes only from the copy and its install.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
IMAGE = "deerflow-temporal-worker:latest"
# Docker's own `${NAME:-default}`, `${NAME-default}`, `${NAME:?error}` and `${NAME}` interpolation.
_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (keyword, arguments), continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def copy_set(text: str) -> list[tuple[list[str], str]]:
    """Each COPY from the build context into the WORKDIR: its sources and destination (the JSON form too;
    ``--chown`` and like flags dropped). Copies from another stage (``--from``) and to absolute paths
    elsewhere (the build's own tools) are not the product's sources."""
    copies = []
    for keyword, rest in instructions(text):
        if keyword == "COPY":
            parts = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
            if any(part.startswith("--from") for part in parts):
                continue
            parts = [part for part in parts if not part.startswith("--")]
            if parts[-1].startswith("/") and not parts[-1].startswith(workdir(text)):
                continue
            copies.append((parts[:-1], parts[-1].removeprefix(workdir(text)).lstrip("/") or "./"))
    return copies


def workdir(text: str) -> str:
    return [rest for keyword, rest in instructions(text) if keyword == "WORKDIR"][-1]


def replay_copies(text: str, app: Path) -> None:
    """COPY as Docker does it: a directory's contents into the destination, files into a ``/`` destination."""
    for sources, dest in copy_set(text):
        target = app / dest
        for source in sources:
            path = ROOT / source
            assert path.exists(), f"COPY {source}: not in the build context"
            if path.is_dir():
                shutil.copytree(path, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            elif dest.endswith("/") or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


@dataclass(frozen=True)
class Image:
    """The replayed image: its WORKDIR (the copied sources) and the virtualenv it installed into."""

    app: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def script(self, name: str) -> Path:
        return self.venv / "bin" / name


def build(tmp: Path) -> Image:
    """Copy, then ``pip install .`` in the WORKDIR, as the Dockerfile's RUN does (no network, no deps)."""
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert workdir(text) == "/app"
    app, venv = tmp / "app", tmp / "venv"
    app.mkdir()
    replay_copies(text, app)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", where], capture_output=True, text=True,
                                  check=True, timeout=60).stdout.strip())
    # The dependencies, as a plain path after the fresh site-packages: no .pth of it is processed.
    (purelib / "_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
         "--no-build-isolation", "--no-index", "--quiet", "--disable-pip-version-check", "."],
        cwd=app, capture_output=True, text=True, timeout=300, check=False)
    assert install.returncode == 0, install.stdout + install.stderr
    return Image(app, venv)


def interpolate(value: str, environ: dict[str, str]) -> str:
    """A compose value with the operator's ``environ``, as ``docker compose`` would read it."""
    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"] or ""
        value = environ.get(name)
        if op in (":-", ":?") and not value:
            value = None
        if value is not None:
            return value
        assert op not in (":?", "?"), f"compose requires {name}: {arg}"
        return arg

    return _INTERPOLATION.sub(one, value.replace("$$", "\0")).replace("\0", "$")


def service_command(service: dict[str, Any], image: Image) -> list[str]:
    """The service's entrypoint + command with the image's ``python`` (the replayed virtualenv's)."""
    command = [*(service.get("entrypoint") or []), *(service.get("command") or [])]
    return [str(image.python) if part == "python" else part for part in command]


def env_file_values(path: Path) -> dict[str, str]:
    """The ``NAME=value`` lines of an env file, as compose reads them (comments and blank lines skipped)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and
             not line.lstrip().startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def service_environment(service: dict[str, Any], operator: dict[str, str]) -> dict[str, str]:
    """What compose gives the service's process: its env_file files (paths with the operator's values, relative
    to the compose file), then its ``environment:``, which wins."""
    files = {}
    for path in service.get("env_file") or []:
        files.update(env_file_values(ROOT / interpolate(path, operator)))
    env = service.get("environment") or {}
    files.update({name: interpolate("" if value is None else str(value), operator) for name, value in env.items()})
    return files


def image_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: service for name, service in compose["services"].items() if service.get("image") == IMAGE}


def process_env(service_env: dict[str, str], **overrides: str) -> dict[str, str]:
    """The service's environment on this machine: PATH and the like from here, no provider key."""
    from offline.providers import without_provider_settings

    base = {key: value for key, value in without_provider_settings(os.environ).items()
            if not key.startswith(("TEMPORAL_", "DEERFLOW_", "AWS_", "OTEL_"))}
    return {**base, **service_env, **overrides}
