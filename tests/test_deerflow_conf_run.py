"""A DeerFlow user's ``conf.yaml`` names the model and nothing else does (issue #21): a real
``worker.py`` process uses that model, with the key ``$SOME_VAR`` expands to, for a whole run. It
used to decide "offline" from the environment alone and serve the demonstration model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from offline.model_server import FakeModelServer
from tests.support.processes import DevServer, start_worker
from tests.support.runs import start
from workflows.contracts.status import RunStatus

pytestmark = pytest.mark.timeout(180)

KEY = "ark-only-in-the-environment"


@pytest.fixture
def provider() -> Iterator[FakeModelServer]:
    """The user's provider: it answers only requests that carry the user's key."""
    with FakeModelServer(api_key=KEY) as server:
        yield server


async def test_a_model_configured_only_in_conf_yaml_serves_the_whole_run(
    dev_server: DevServer, client: Client, provider: FakeModelServer, tmp_path: Path,
) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text(f"BASIC_MODEL:\n  base_url: {provider.base_url}\n  model: users-model\n  api_key: $SOME_VAR\n")
    log = tmp_path / "worker.log"
    worker = await start_worker(dev_server, client, log, DEERFLOW_CONF=str(conf), SOME_VAR=KEY,
                                DEERFLOW_ENV_FILE=str(tmp_path / "absent.env"))
    try:
        handle = await start(client, auto_accept_plan=True, max_step_num=1)
        result = await handle.result()
        status = await handle.query("status", result_type=RunStatus)
    finally:
        worker.stop()
    assert result.report
    assert status.offline_providers == ["search"]  # no search key: only the search is the bundled corpus
    models = {body.get("model") for body in provider.requests}
    assert models == {"users-model"}, log.read_text()
    assert provider.requests_for("planner") and provider.requests_for("reporter")
    banner = log.read_text()
    assert "OFFLINE SEARCH CORPUS" in banner and "OFFLINE DEMONSTRATION MODEL" not in banner
