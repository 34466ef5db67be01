"""Shared fixtures: Temporal test servers, the offline fake providers, and workers.

Everything talks to loopback only. The fake model and search servers are the same ones the
offline demo uses; the activities are the real ones, with their real HTTP clients.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.model.kept_verdicts import FILENAME as KEPT_VERDICTS
from config.settings import Settings, load_settings
from hosting.registry import running
from offline.model_server import FakeModelServer
from offline.providers import offline_env
from offline.search_server import FakeSearchServer
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from runtime.shutdown import exit_now
from tests.support.cdp import Chromium, Page, chromium_path, open_page
from tests.support.isolation import isolate_this_process
from tests.support.processes import TEST_SERVER, DevServer
from tests.support.runs import STARTED
from tests.support.stand_in_runs import StartStandIn, stand_in_runs
from tests.support.web_server import api_server
from tests.support.workers import WorkerWith, harness_workers, own_worker

_own_tmp = pytest.StashKey[str]()
_exit_status = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest process (``make test`` starts four) gets its own sandbox uid pool and temp directory
    (tests/support/isolation.py says why)."""
    config.stash[_own_tmp] = isolate_this_process()


@pytest.fixture(scope="session")
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture(scope="session")
def search_server() -> Iterator[FakeSearchServer]:
    with FakeSearchServer() as server:
        yield server


@pytest.fixture(scope="session")
def chromium() -> Iterator[Chromium]:
    """One headless Chromium for the test process's pages, started by the first (tests/support/cdp.py)."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    browser = Chromium(executable)
    yield browser
    browser.stop()


@pytest.fixture
async def page(chromium: Chromium) -> AsyncIterator[Page]:
    """A page in a browser context of its own: no cookies, storage or cache from another test."""
    async with open_page(chromium) as opened:
        yield opened


@pytest.fixture(scope="session")
def provider_env(model_server: FakeModelServer, search_server: FakeSearchServer) -> dict[str, str]:
    """The worker settings, by env name, that point at the fakes (and keep real keys out)."""
    return {**offline_env(model_server, search_server), "LLM_REQUEST_TIMEOUT": "5"}


@pytest.fixture(scope="session")
def worker_settings(provider_env: dict[str, str]) -> Settings:
    """The settings the session's worker and the activity tests are built with."""
    return load_settings(environ=provider_env)


@pytest.fixture(scope="session")
def _kept_verdicts() -> Path:
    """The tool-support verdicts file of the home the tests' workers share (activities/model/kept_verdicts.py)."""
    return load_settings().home / KEPT_VERDICTS


@pytest.fixture(autouse=True)
def _no_kept_verdicts(_kept_verdicts: Path) -> None:
    """Each test's new workers start knowing no tool-support verdict, as in a fresh home: the fake
    model of the session keeps its address, and a verdict an earlier test left would spare a probe
    a test counts. Within a test, a worker started after another still inherits its verdicts."""
    _kept_verdicts.unlink(missing_ok=True)


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
def _process_logging_restored() -> Iterator[None]:
    """A command run in-process (``starter.main``) sets the process's logging up as a real one would:
    a root handler on the standard error pytest is capturing, and a default Temporal runtime that
    forwards the SDK core's records to Python's logging. The handler outlived the test, its stream
    closed with the test's capture, and every later record of that pytest process failed to print
    ("--- Logging error ---" in the suite's output). Such handlers (a plain ``StreamHandler``, which
    pytest's own are not) go when the test ends, and the root level back to what it was."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in root.handlers[:]:
        if type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(autouse=True)
async def _terminate_leftover_runs() -> AsyncIterator[None]:
    """A run a test leaves behind must not consume the next test's injected faults."""
    yield
    while STARTED:
        handle = STARTED.pop()
        with contextlib.suppress(Exception):
            await handle.terminate("test finished")


@pytest.fixture(scope="module")
async def time_env(worker_settings: Settings) -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server per test module. The server stops skipping time while an activity is
    in flight, and a run terminated mid-activity never releases that lock (its activity can no
    longer complete), so one test's leftover run would leave every later test on a shared server
    waiting out two-hour timeouts in real time (CI, 2026-11-27: two budget tests hung for 300 s).
    A module's own server bounds that to the module, whose tests are written together."""
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter(worker_settings), test_server_existing_path=TEST_SERVER
    )
    yield env
    await env.shutdown()


@pytest.fixture(scope="module")
async def time_worker(time_env: WorkflowEnvironment, worker_settings: Settings) -> AsyncIterator[Client]:
    """A worker on the time-skipping server running the real workflow and real activities."""
    async with running(harness_workers(time_env.client, worker_settings)):
        yield time_env.client


@pytest.fixture(scope="module")
def worker_with(time_env: WorkflowEnvironment) -> WorkerWith:
    """``async with worker_with(settings) as client``: a worker of the test's own, built with
    ``settings``, on a task queue of its own on the time-skipping server, until the block ends; runs
    ``client`` starts go to it (tests/support/workers.py)."""
    return functools.partial(own_worker, time_env.client)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_exit_status] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without interpreter finalization, which the SDK can crash (see runtime/shutdown.py)."""
    shutil.rmtree(config.stash[_own_tmp], ignore_errors=True)
    exit_now(config.stash.get(_exit_status, 0))


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """The bundled dev server on free ports, one per test module (end-to-end tests)."""
    server = DevServer(tmp_path_factory.mktemp("temporal") / "temporal.db").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def client(dev_server: DevServer) -> AsyncIterator[Client]:
    yield await connect_when_ready(dev_server.address, data_converter=data_converter(load_settings()))


@pytest.fixture(scope="module")
async def open_api(client: Client) -> AsyncIterator[str]:
    """Our API server without a token (loopback callers are the local admin) on the module's dev server."""
    async with api_server(client, load_settings().model_copy(update={"web_token": None})) as url:
        yield url


@pytest.fixture
async def stand_in(client: Client) -> AsyncIterator[StartStandIn]:
    """Starts stand-in runs (tests/support/stand_in_runs.py) that end as each test asks."""
    async with stand_in_runs(client) as start:
        yield start
