"""The coder's sandbox the way the shipped deployment runs it, attacked.

There is no Docker engine here, so the test reproduces what docker-compose.yml gives each service
with ``setpriv``: the service's uid, and exactly its capabilities (bounding = permitted =
effective = ``cap_add``, inheritable and ambient empty, as Docker sets them), ``no_new_privs``.
The capability list is read from docker-compose.yml, so changing compose changes this test.
What it cannot reproduce: Docker's seccomp profile (it only removes syscalls), the AppArmor
setting and the container's own namespaces.

The sandbox service, as root with only those capabilities, runs the attacks the issue found
(secrets, the blob store, another run's files, conf.yaml, Temporal, other addresses, leftover
processes, killing the worker, filling the disk); each must be contained. The main worker, as
the image's non-root user with no capability, must refuse to run code at all.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.runner import SandboxLimits

REPO_DIR = Path(__file__).resolve().parent.parent
COMPOSE = REPO_DIR / "docker-compose.yml"
SECRET = "sk-deployment-" + uuid.uuid4().hex
IMAGE_UID = 10001  # the Dockerfile's `useradd --uid 10001 deerflow`, the main worker's USER
# The image's Python is /usr/local/bin/python; this machine's venv Python lives under /root,
# which uid 10001 cannot traverse, so the non-root worker uses Debian's Python of the same version.
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("capsh"),
    reason="needs root, setpriv and capsh to reproduce the deployment's credentials")


def compose_service(name: str) -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"][name]


def setpriv(uid: int, capabilities: list[str]) -> list[str]:
    """The service's credentials: cap_drop ALL + cap_add, no inheritable/ambient caps, no_new_privs."""
    bounding = ",".join(["-all", *(f"+{cap.lower()}" for cap in capabilities)])
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", f"--bounding-set={bounding}",
            "--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs", "--"]


def cap_names(mask: str) -> set[str]:
    decoded = subprocess.run(["capsh", f"--decode={mask}"], capture_output=True, text=True, check=True).stdout
    names = decoded.strip().split("=", 1)[1] if "=" in decoded else ""
    return {name.removeprefix("cap_").upper() for name in names.split(",") if name}


def run_driver(command: list[str], snippets: list[str], env: dict[str, str], cwd: Path = REPO_DIR) -> dict[str, Any]:
    """Start the stand-in worker; ``WORKER_PID`` in a snippet becomes its pid (setpriv execs it)."""
    process = subprocess.Popen([*command, "-m", "tests.support.sandbox_driver"], cwd=cwd, env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(json.dumps(snippets).replace("WORKER_PID", str(process.pid)), timeout=120)
    assert process.returncode == 0, f"the worker died (rc {process.returncode}): {stderr[-3000:]}"
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture
def listeners() -> Iterator[dict[str, socket.socket]]:
    """A live port like the Temporal frontend's on 127.0.0.1, and another service on 127.0.0.2."""
    opened = {}
    for host in ("127.0.0.1", "127.0.0.2"):
        listener = socket.socket()
        listener.bind((host, 0))
        listener.listen(8)
        listener.settimeout(0.2)
        opened[host] = listener
    yield opened
    for listener in opened.values():
        listener.close()


@pytest.fixture
def deployment(tmp_path: Path) -> dict[str, Path]:
    """What a sandbox worker's machine holds: conf.yaml with a key, the blob store, another run."""
    home = tmp_path / "home"
    blobs = home / "blobs" / "ab"
    blobs.mkdir(parents=True)
    (blobs / "ab12").write_text(f"another run's payload {SECRET}")
    conf = tmp_path / "conf.yaml"
    conf.write_text(f"BASIC_MODEL:\n  api_key: {SECRET}\n")
    other_run = Path(f"/tmp/deerflow-py-other-{uuid.uuid4().hex}")  # where a concurrent run's code lives
    other_run.mkdir(mode=0o700)
    (other_run / "snippet.py").write_text(f"print('{SECRET}')")
    yield {"home": home, "blob": blobs / "ab12", "conf": conf, "other_run": other_run}
    shutil.rmtree(other_run, ignore_errors=True)


def worker_env(paths: dict[str, Path], **extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": SECRET, "TAVILY_API_KEY": SECRET,
            "AWS_SECRET_ACCESS_KEY": SECRET, "DEERFLOW_CONF": str(paths["conf"]),
            "DEERFLOW_HOME": str(paths["home"]), **extra}


def try_all(*attempts: str) -> str:
    """A snippet that makes each attempt and prints ``OK <what>`` or ``DENIED <what>``."""
    body = "import os, socket, signal, subprocess, sys, time\n"
    for attempt in attempts:
        body += (f"try:\n    __r = ({attempt})\n    print('OK', {attempt!r}, repr(__r)[:300])\n"
                 f"except Exception as error:\n    print('DENIED', {attempt!r}, type(error).__name__)\n")
    return body


LEFTOVER = f"deerflow-leftover-{uuid.uuid4().hex}"
PLANTED = Path(f"/tmp/planted-{uuid.uuid4().hex}")  # unique: a stale file must not fail a later run


def attacks(paths: dict[str, Path], ports: dict[str, int]) -> dict[str, str]:
    blob, other, conf = paths["blob"], paths["other_run"], paths["conf"]
    return {
        # Its own environment and the processes it can see are fair to read; the worker's are not.
        "secrets": "import os\nprint(dict(os.environ), open('/proc/self/environ').read())\n"
                   "print('PIDS', sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
                   + try_all("open('/proc/WORKER_PID/environ').read()", "os.kill(WORKER_PID, 0)"),
        "files": try_all(
            f"open({str(blob)!r}).read()", f"os.listdir({str(blob.parent.parent)!r})",
            f"open({str(blob.parent / 'planted')!r}, 'w').write('x')",
            f"open({str(other / 'snippet.py')!r}).read()", f"open({str(other / 'planted')!r}, 'w').write('x')",
            f"open({str(conf)!r}).read()", f"open({str(REPO_DIR / 'pyproject.toml')!r}).read()",
            f"open('{PLANTED}', 'w').write('x')"),
        "network": try_all(
            f"socket.create_connection(('127.0.0.1', {ports['127.0.0.1']}), timeout=2).close()",
            f"socket.create_connection(('127.0.0.2', {ports['127.0.0.2']}), timeout=2).close()",
            "socket.getaddrinfo('temporal', 7233)"),
        "leftover": f"import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', "
                    f"'import time; time.sleep(60)', '{LEFTOVER}'], start_new_session=True)\n"
                    "print('OK started', p.pid)\n",
        # Stopped at the time limit by the supervisor (root killing the code's uid: CAP_KILL).
        "timeout": f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', "
                   f"'import time; time.sleep(60)', '{LEFTOVER}'])\ntime.sleep(60)\n",
        "kill": try_all("os.kill(WORKER_PID, signal.SIGKILL)", "os.kill(-1, signal.SIGKILL)"),
        "disk": "n = 0\ntry:\n    for i in range(200):\n        open(f'f{i}', 'wb').write(b'x' * 8_000_000)\n"
                "        n += 8_000_000\nexcept OSError as error:\n    print('DENIED fill', error.errno)\nprint(n)\n",
        "still_alive": "print('OK after the attacks')",
    }


def host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if marker.encode() in Path(entry.path, "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.timeout(120)
def test_the_sandbox_service_contains_the_attacks(deployment: dict[str, Path],
                                                  listeners: dict[str, socket.socket]) -> None:
    service = compose_service("sandbox")
    uid = int(str(service["user"]).split(":")[0])
    capabilities = service["cap_add"]
    ports = {host: listener.getsockname()[1] for host, listener in listeners.items()}
    named = attacks(deployment, ports)
    try:
        report = run_driver([*setpriv(uid, capabilities), sys.executable], list(named.values()),
                                        worker_env(deployment, DEERFLOW_SANDBOX_MODE="isolated"))
        leftovers = host_processes_with(LEFTOVER)
    finally:
        for pid in host_processes_with(LEFTOVER):  # a broken guard must not leave it running
            os.kill(pid, 9)
    credentials = report["credentials"]
    # Exactly what compose grants, as the kernel sees it.
    assert credentials["uid"] == credentials["euid"] == uid
    for field in ("CapEff", "CapPrm", "CapBnd"):
        assert cap_names(credentials[field]) == {cap.upper() for cap in capabilities}, field
    assert int(credentials["CapInh"], 16) == int(credentials["CapAmb"], 16) == 0
    assert credentials["no_new_privs"] == "1"
    assert report["mode"] == "isolated", report["reason"]

    results = dict(zip(named, report["results"], strict=True))
    for name, result in results.items():
        assert "error" not in result, (name, result)
        output = result["stdout"] + result["stderr"]
        assert SECRET not in output, (name, output)
        if name not in ("leftover", "still_alive", "disk"):
            assert "\nOK " not in "\n" + result["stdout"], (name, result["stdout"])
    assert "OPENAI_API_KEY" not in results["secrets"]["stdout"]
    assert "PIDS ['1']\n" in results["secrets"]["stdout"]  # its own PID namespace: the worker is not there
    assert "DENIED open('/proc/WORKER_PID/environ')" not in results["secrets"]["stdout"]  # the pid was filled in
    for listener in listeners.values():
        with pytest.raises(TimeoutError):
            listener.accept()
    assert not (deployment["blob"].parent / "planted").exists()
    assert not (deployment["other_run"] / "planted").exists() and not PLANTED.exists()
    assert "OK started" in results["leftover"]["stdout"] and leftovers == []
    assert results["timeout"]["stopped"] == "timeout", results["timeout"]
    assert results["disk"]["stdout"].startswith("DENIED fill 28")  # ENOSPC at the cap
    assert int(results["disk"]["stdout"].split()[-1]) <= SandboxLimits().disk_bytes
    assert results["still_alive"]["stdout"] == "OK after the attacks\n"  # the worker survived them all


def traversable_by_others(path: Path) -> bool:
    return all(part.stat().st_mode & 0o001 for part in (path, *path.parents))


@pytest.fixture
def image_app() -> Iterator[tuple[Path, Path]]:
    """The code and libraries as the image's user can read them, like the image's /app.

    A checkout under a private directory (``mktemp -d`` is 0700, so is /root) is out of the
    image user's reach; then the sources and site-packages are hard-linked (copied across file
    systems) into a world-readable directory, so the test runs wherever the repository lives.
    """
    purelib = Path(sysconfig.get_path("purelib"))
    if traversable_by_others(REPO_DIR) and traversable_by_others(purelib):
        yield REPO_DIR, purelib
        return
    shared = Path(tempfile.mkdtemp(prefix="image-app-"))
    try:
        shared.chmod(0o755)
        link = functools.partial(shutil.copytree, copy_function=hard_link_or_copy, symlinks=True)
        link(REPO_DIR, shared / "app", ignore=shutil.ignore_patterns(".venv", ".git", ".deerflow", "__pycache__"))
        link(purelib, shared / "site-packages")
        for directory, _, _ in os.walk(shared):  # copytree gave them the private source's modes
            os.chmod(directory, 0o755)
        yield shared / "app", shared / "site-packages"
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def hard_link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason=f"no {SYSTEM_PYTHON} for the non-root worker")
def test_the_non_root_main_worker_refuses_to_run_code(image_app: tuple[Path, Path]) -> None:
    service = compose_service("worker")
    assert service["cap_drop"] == ["ALL"] and "cap_add" not in service
    app, site_packages = image_app
    env = {"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": SECRET, "DEERFLOW_CONF": "/nonexistent/conf.yaml",
           "PYTHONPATH": f"{app}:{site_packages}"}
    marker = Path(f"/tmp/ran-uncontained-{uuid.uuid4().hex}")
    try:
        report = run_driver([*setpriv(IMAGE_UID, []), str(SYSTEM_PYTHON)], [f"open('{marker}', 'w').write('x')"], env,
                            cwd=app)
        ran = marker.exists()
    finally:
        marker.unlink(missing_ok=True)
    assert report["credentials"]["uid"] == IMAGE_UID and int(report["credentials"]["CapBnd"], 16) == 0
    assert report["mode"] == "refused"
    [result] = report["results"]
    assert result["type"] == "SandboxError" and result["non_retryable"], result
    assert "refuses to run code on this worker" in result["error"] and "DEERFLOW_SANDBOX_MODE=plain" in result["error"]
    assert not ran
