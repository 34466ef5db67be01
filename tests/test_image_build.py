"""The worker image builds, and every compose service that runs it starts (issue #22).

Why: the Dockerfile copies sources by name, so a package in pyproject.toml that is missing from its
COPY lines (server/ was) breaks ``pip install .`` in the image, and a module the image lacks breaks
a service only when it starts. Reading the Dockerfile's text proves neither; this replays the build
(tests/image_replay.py) and starts each service's own command from the replayed image against a dev
server, with the service's compose environment (its Temporal address and payload store pointed here).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from runtime.embedded import free_port
from tests.image_replay import (
    COMPOSE,
    ROOT,
    Image,
    build,
    image_services,
    process_env,
    service_command,
    service_environment,
)
from tests.processes import DevServer
from tests.prometheus_text import scrape
from tests.support import QUESTION, awaiting_review, run_id, wait_for
from workflows.models import TASK_QUEUE, WORKFLOW_TYPE, ResearchRequest
from workflows.queues import QUEUE_KINDS, queue_name

# What an operator must set before `docker compose up` (the file's `${NAME:?…}` variables).
OPERATOR = {"MINIO_ROOT_USER": "replay-admin", "MINIO_ROOT_PASSWORD": "replay-admin-password",
            "SANDBOX_S3_USER": "replay-sandbox", "SANDBOX_S3_PASSWORD": "replay-sandbox-password",
            "POSTGRES_PASSWORD": "replay-postgres", "DEERFLOW_WEB_TOKEN": "replay-web-token"}
START_SECONDS = 90


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    return build(tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return image_services(yaml.safe_load(COMPOSE.read_text(encoding="utf-8")))


def here(service: dict[str, Any], dev_server: DevServer, home: Path) -> dict[str, str]:
    """The service's compose environment, with Temporal, the store and the ports of this machine."""
    env = {name: value for name, value in service_environment(service, OPERATOR).items()
           if not name.startswith(("AWS_", "DEERFLOW_S3_"))}
    # No payload store: the test's client reads the run's payloads inline, from no store of the service's.
    env.update(TEMPORAL_ADDRESS=dev_server.address, DEERFLOW_PAYLOAD_STORE="none", DEERFLOW_HOME=str(home),
               OTEL_EXPORTER_OTLP_ENDPOINT="")
    if "DEERFLOW_METRICS_ADDRESS" in env:
        env["DEERFLOW_METRICS_ADDRESS"] = f"127.0.0.1:{free_port()}"
    return process_env(env)


def on_loopback(command: list[str], port: int) -> list[str]:
    """``--host 0.0.0.0 --port N`` (all interfaces in a container) as loopback and a free port here."""
    out = list(command)
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        if flag in out:
            out[out.index(flag) + 1] = value
    return out


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


def answers_http(port: int, process: subprocess.Popen[bytes], log: Path) -> int:
    deadline = time.monotonic() + START_SECONDS
    while True:
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()}"
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/")
            return connection.getresponse().status
        except OSError:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)


def test_the_image_installs_the_project_from_its_copy_set(image: Image) -> None:
    # The install itself is the fixture's; what it put in site-packages is the whole product.
    script = ("import importlib, sys; sys.path.remove('') if '' in sys.path else None; "
              "mods = ['worker', 'starter', 'server.serve', 'server.codec', 'server.app', 'cli.commands']; "
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
    templates = ("from activities.prompts import PROMPTS_DIR as d; "
                 "print(d, *sorted(str(p.relative_to(d)) for p in d.rglob('*.md')))")
    result = subprocess.run([str(image.python), "-I", "-c", templates], cwd=image.venv, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    where, *shipped = result.stdout.split()
    assert where.startswith(str(image.venv))
    assert shipped == sorted(str(path.relative_to(ROOT / "prompts")) for path in (ROOT / "prompts").rglob("*.md"))


async def test_every_compose_service_of_the_image_starts_from_it(
        image: Image, services: dict[str, dict[str, Any]], dev_server: DevServer, client: Client,
        started: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    assert {"worker", "sandbox", "codec", "cli"} <= set(services)
    workers: dict[str, set[str]] = {"worker": {"main", "model", "tools"}, "sandbox": {"sandbox"}}
    listening: dict[str, int] = {}
    metrics_addresses: dict[str, str] = {}
    for name, service in services.items():
        if name == "cli":
            continue
        log = tmp_path / f"{name}.log"
        port = free_port()
        command = on_loopback(service_command(service, image), port)
        env = here(service, dev_server, tmp_path / name)
        metrics_addresses[name] = env.get("DEERFLOW_METRICS_ADDRESS", "")
        with log.open("wb") as out:
            started.append(subprocess.Popen(command, cwd=image.app, stdout=out, stderr=subprocess.STDOUT, env=env))
        if name not in workers:
            listening[name] = port
    build = subprocess.run([str(image.script("deerflow-worker")), "--version"], capture_output=True, text=True,
                           cwd=image.venv, timeout=120, check=True).stdout.split()
    for name, process in zip([name for name in services if name != "cli"], started, strict=True):
        log = tmp_path / f"{name}.log"
        if name in workers:
            await until_polled(client, process, log, workers[name])
            # Its build, as the installed script reports it, on its polls (history records it for each
            # workflow task and activity attempt) and on every metric series.
            version, digest = build[1], build[-1].rstrip(")")
            for kind in workers[name]:
                identities = [identity for identity in await pollers(client, kind)
                              if identity.startswith(f"{process.pid}@")]
                assert identities and all(identity.endswith(f" deerflow-temporal/{version}+{digest}")
                                          for identity in identities), identities
            metrics = services[name]["environment"].get("DEERFLOW_METRICS_ADDRESS")
            if metrics:
                text = scrape(metrics_addresses[name])
                assert f'deerflow_code="{digest}"' in text and f'deerflow_version="{version}"' in text
        else:
            assert answers_http(listening[name], process, log) < 500, name
    # A run to its review, and a bad review signal: the keyed worker's log lines carry the run.
    handle = await client.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION), id=run_id("image"),
                                         task_queue=TASK_QUEUE)
    await wait_for(handle, awaiting_review, timeout=START_SECONDS)
    await handle.signal("plan_feedback", "nonsense")
    await wait_for(handle, lambda status: any(event.kind == "ignored" for event in status.events))
    await handle.terminate()
    for name in ("worker", "sandbox", "codec"):
        lines = [line for line in (tmp_path / f"{name}.log").read_text().splitlines() if line.strip()]
        records = [json.loads(line) for line in lines]  # LOG_FORMAT=json: every line one object
        assert records and all({"time", "level", "logger", "message"} <= set(record) for record in records), name
    records = [json.loads(line) for line in (tmp_path / "worker.log").read_text().splitlines() if line.strip()]
    run = {"workflow_id": handle.id, "run_id": handle.result_run_id}
    ignored = [record for record in records if record["message"].startswith("Ignored plan_feedback")]
    assert len(ignored) == 1 and ignored[0].items() >= {**run, "workflow_type": WORKFLOW_TYPE}.items(), ignored
    chats = [record for record in records if record.get("activity_type") == "chat"]
    assert chats and all(record.items() >= {**run, "attempt": 1}.items() for record in chats), records
    # The CLI service (`docker compose run cli list`), on the same server.
    cli = services["cli"]
    result = subprocess.run([*service_command(cli, image), "list"], cwd=image.app, capture_output=True, text=True,
                            env=here(cli, dev_server, tmp_path / "cli"), timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
