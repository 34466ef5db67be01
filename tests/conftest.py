"""Shared fixtures: Temporal test servers, the offline fake providers, and a worker.

Everything talks to loopback only. The fake model and search servers are the same ones the
offline demo uses; the activities are the real ones, with their real HTTP clients.
"""

from __future__ import annotations

import contextlib
import os
import sysconfig
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.registry import ACTIVITIES, SANDBOX_ACTIVITIES
from activities.scrub_interceptor import SecretScrubbingInterceptor
from activities.settings import get_settings
from offline.model_server import FakeModelServer
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.shutdown import exit_now
from tests.processes import DevServer
from tests.support import STARTED
from workflows.models import TASK_QUEUE
from workflows.queues import SANDBOX_TASK_QUEUE
from workflows.research import DeepResearchWorkflow

SCRIPTS = Path(sysconfig.get_path("scripts"))
TEMPORAL_CLI = SCRIPTS / "temporal"
TEST_SERVER = SCRIPTS / "temporal-test-server"
REPO_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture(scope="session")
def search_server() -> Iterator[FakeSearchServer]:
    with FakeSearchServer() as server:
        yield server


@pytest.fixture(scope="session")
def provider_env(model_server: FakeModelServer, search_server: FakeSearchServer) -> Iterator[dict[str, str]]:
    """Point the worker settings of this process at the fakes (and keep real keys out)."""
    values = {**offline_env(model_server, search_server), "LLM_REQUEST_TIMEOUT": "5"}
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    get_settings.cache_clear()
    yield values
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    get_settings.cache_clear()


@pytest.fixture(autouse=True)
def _reset_fakes(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts with no queued faults, an empty request log and no latency."""
    yield
    for name in ("model_server", "search_server"):
        if name in request.fixturenames:
            server = request.getfixturevalue(name)
            server.clear_faults()
            server.requests.clear()
            server.latency_seconds = 0.0


@pytest.fixture(autouse=True)
async def _terminate_leftover_runs() -> AsyncIterator[None]:
    """A run a test leaves behind must not consume the next test's injected faults."""
    yield
    while STARTED:
        handle = STARTED.pop()
        with contextlib.suppress(Exception):
            await handle.terminate("test finished")


@pytest.fixture(scope="session")
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(), test_server_existing_path=str(TEST_SERVER)
    )
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
async def time_worker(time_env: WorkflowEnvironment, provider_env: dict[str, str]) -> AsyncIterator[Client]:
    """A worker on the time-skipping server running the real workflow and real activities."""
    async with Worker(time_env.client, task_queue=TASK_QUEUE, workflows=[DeepResearchWorkflow],
                      activities=ACTIVITIES, interceptors=[SecretScrubbingInterceptor()]), \
            Worker(time_env.client, task_queue=SANDBOX_TASK_QUEUE, activities=SANDBOX_ACTIVITIES,
                   interceptors=[SecretScrubbingInterceptor()]):
        yield time_env.client


_exit_status = 0


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without interpreter finalization, which the SDK can crash (see runtime/shutdown.py)."""
    exit_now(_exit_status)


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """The bundled dev server on free ports, one per test module (end-to-end tests)."""
    server = DevServer(tmp_path_factory.mktemp("temporal") / "temporal.db").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def client(dev_server: DevServer) -> AsyncIterator[Client]:
    yield await connect_when_ready(dev_server.address, data_converter=data_converter())

