"""The suite is hermetic: the checkout's ``.deerflow/``, ``.env`` and ``conf.yaml`` change no test (issue #42,
item 8).

A ``starter.py serve`` running in the checkout announces its token stream in ``.deerflow/``; the
suite's workers found it and streamed every turn, and three tests failed. A developer's ``.env`` naming
a model server and the JSON tool mode failed two more. Each pytest process now has a home and
configuration files of its own (tests/support/isolation.py). The first tests hold that in any session;
the last plays it for real: a copy of the checkout with ``serve`` running in it, a dead run's leftovers
in its ``.deerflow/`` and a developer's ``.env`` and ``conf.yaml`` beside it, and the suite's
checkout-sensitive tests run there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.model.llm import ModelActivities
from config.settings import Settings, load_settings
from offline.model_server import FakeModelServer
from runtime.token_stream_format import ANNOUNCEMENT, configured_sink
from tests.support.chat_requests import COORDINATOR
from tests.support.checkout import copy_checkout
from tests.support.isolation import CHECKOUT_FILES, CHECKOUT_HOME
from tests.support.processes import DevServer, WorkerProcess, free_port, wait_for_port

# What the real test runs inside the copy: the tests a checkout's home or configuration files would change.
CHECKOUT_SENSITIVE = ["tests/test_hermetic.py::test_no_setting_of_the_suite_points_at_the_checkouts_home",
                      "tests/test_hermetic.py::test_no_setting_of_the_suite_reads_the_checkouts_files",
                      "tests/test_hermetic.py::test_the_suites_model_turns_are_not_previewed"]
# A developer's own configuration in the checkout: a model server, a key, JSON tool mode, tiny caps.
DEVELOPERS_ENV = ("OPENAI_API_KEY=sk-a-developers-own-key-0000\nOPENAI_BASE_URL=http://127.0.0.2:9/v1\n"
                  "LLM_TOOL_MODE=json\nLLM_MAX_OUTPUT_TOKENS=64\nDEERFLOW_WEB_TOKEN=a-developers-web-token-00\n")
DEVELOPERS_CONF = "BASIC_MODEL:\n  base_url: http://127.0.0.2:9/v1\n  model: a-developers-model\n"


def test_no_setting_of_the_suite_points_at_the_checkouts_home(worker_settings: Settings, tmp_path: Path) -> None:
    homes = {Settings().home, load_settings().home, load_settings(environ={}).home, worker_settings.home,
             Path(WorkerProcess("127.0.0.1:1", tmp_path / "log").environment()["DEERFLOW_HOME"])}
    assert len(homes) == 1 and CHECKOUT_HOME not in homes, homes
    assert Settings(DEERFLOW_HOME=str(tmp_path)).home == tmp_path  # a test's own home still wins


def test_no_setting_of_the_suite_reads_the_checkouts_files(worker_settings: Settings, tmp_path: Path) -> None:
    """Where a developer keeps a ``.env`` and a ``conf.yaml``, every setting would have come from them."""
    loaded = [Settings(), load_settings(), load_settings(environ={}), worker_settings]
    files = {path.absolute() for settings in loaded for path in (settings.env_file, settings.conf_path)}
    environment = WorkerProcess("127.0.0.1:1", tmp_path / "log").environment()
    files |= {Path(environment[name]).absolute() for name in ("DEERFLOW_CONF", "DEERFLOW_ENV_FILE")}
    assert not files & set(CHECKOUT_FILES), files
    assert [source for settings in loaded for source in settings.sources().values()
            if source != "environment"] == []  # nothing came from a file
    assert worker_settings.llm_tool_mode == Settings.model_fields["llm_tool_mode"].default


async def test_the_suites_model_turns_are_not_previewed(worker_settings: Settings,
                                                        model_server: FakeModelServer) -> None:
    """With a ``serve`` announcing its sink in the checkout, as a developer's does."""
    assert configured_sink(worker_settings) is None
    await ActivityEnvironment().run(ModelActivities(worker_settings).chat, COORDINATOR)
    assert model_server.requests and not model_server.requests[-1].get("stream")


def leave_a_dead_runs_state(home: Path) -> None:
    """What a killed ``serve``, worker and dev server leave in a home: a stale announcement (a sink that
    is gone), pid files of processes that are gone, a journal of a dead worker, a blob."""
    home.mkdir(parents=True)
    (home / ANNOUNCEMENT).write_text(json.dumps({"url": "http://127.0.0.2:9/internal/token-stream",
                                                 "token": "stale-token-of-a-dead-serve"}))
    for name in ("worker", "server", "codec"):
        (home / f"{name}.pid").write_text(json.dumps({"pid": 4_000_000, "start": 1}))
    (home / "inflight").mkdir()
    (home / "inflight" / "4000000.journal").write_text("garbage\n")
    (home / "blobs" / "ab").mkdir(parents=True)
    (home / "blobs" / "ab" / ("ab" * 32)).write_bytes(b"not a payload")


@pytest.mark.timeout(240)
def test_a_serve_running_in_the_checkout_and_its_leftovers_change_no_test(dev_server: DevServer,
                                                                         tmp_path: Path) -> None:
    checkout = copy_checkout(tmp_path / "checkout", tests=True)
    home = checkout / ".deerflow"
    leave_a_dead_runs_state(home)
    stale = (home / ANNOUNCEMENT).read_text()
    (checkout / ".env").write_text(DEVELOPERS_ENV)
    (checkout / "conf.yaml").write_text(DEVELOPERS_CONF)
    # As a developer runs them there: nothing says where the home and the files are, so each takes the checkout's.
    environ = {key: value for key, value in os.environ.items()
               if key not in ("DEERFLOW_HOME", "DEERFLOW_CONF", "DEERFLOW_ENV_FILE")
               and not key.startswith(("PYTEST_", "DEERFLOW_WEB_"))}
    port = free_port()
    serve = subprocess.Popen([sys.executable, "starter.py", "serve", "--port", str(port)], cwd=checkout,
                             env={**environ, "TEMPORAL_ADDRESS": dev_server.address}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_port(port, timeout=60)
        deadline = time.monotonic() + 30
        while (home / ANNOUNCEMENT).read_text() == stale:
            assert time.monotonic() < deadline, "serve never announced its sink in the copy's home"
            time.sleep(0.1)
        suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                                *CHECKOUT_SENSITIVE], cwd=checkout, env=environ, capture_output=True, text=True,
                               timeout=180, check=False)
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
    assert f"{len(CHECKOUT_SENSITIVE)} passed" in suite.stdout
