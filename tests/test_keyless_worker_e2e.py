"""A worker without the encryption keys meets an encrypted run (issue #19 item 4), end to end.

It used to fail the run ("Unknown payload encoding binary/encrypted"). Now it says at start that
it holds no key, refuses the run's payloads by name, loudly, and fails only the workflow task, which
the server retries: a worker with the keys then takes the run over and it completes. A client
without the keys (``starter.py status``) says which setting is missing in one line, exit code 2.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import time
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError

from config.settings import load_settings
from runtime.connection import connect_when_ready
from runtime.converter import data_converter
from tests.support.processes import DevServer, run_starter, start_worker
from tests.support.runs import QUESTION, run_id
from workflows.contracts.research import TASK_QUEUE, WORKFLOW_TYPE, Outcome, ResearchRequest, ResearchResult
from workflows.contracts.status import Awaiting, RunStatus

pytestmark = pytest.mark.timeout(240)

KEYS = f"k2026:{base64.b64encode(os.urandom(32)).decode()},k2025:{base64.b64encode(os.urandom(32)).decode()}"


async def failed_task_message(handle: WorkflowHandle, timeout: float = 60) -> str:
    """The failure of the run's first failed workflow task (the server records the first only)."""
    deadline = time.monotonic() + timeout
    while True:
        history = await handle.fetch_history()
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                return event.workflow_task_failed_event_attributes.failure.message
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING, "the run ended"
        assert time.monotonic() < deadline, "no workflow task failed"
        await asyncio.sleep(0.3)


async def awaiting_review(handle: WorkflowHandle, timeout: float = 120) -> None:
    """Until the run waits for its review (the query fails while its workflow task waits for a retry)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if (await handle.query("status", result_type=RunStatus)).awaiting is Awaiting.PLAN_FEEDBACK:
                return
        except RPCError as error:
            assert "failed state" in error.message, error
        assert time.monotonic() < deadline, "the run was not taken over"
        await asyncio.sleep(0.5)


def starter_status(dev_server: DevServer, env: dict[str, str], workflow_id: str) -> subprocess.CompletedProcess[str]:
    return run_starter({**os.environ, **env, "TEMPORAL_ADDRESS": dev_server.address}, "status", workflow_id)


async def test_a_worker_without_keys_leaves_an_encrypted_run_to_one_with_them(
    dev_server: DevServer, tmp_path: Path,
) -> None:
    plain = {"DEERFLOW_HOME": str(tmp_path / "home"), "DEERFLOW_PAYLOAD_STORE": "filesystem"}
    keyed_env = {**plain, "DEERFLOW_ENCRYPTION_KEYS": KEYS}
    keyed = await connect_when_ready(dev_server.address, data_converter=data_converter(load_settings(keyed_env)))

    keyless_log = tmp_path / "keyless.log"
    keyless = await start_worker(dev_server, keyed, keyless_log, **plain)
    try:
        handle = await keyed.start_workflow(WORKFLOW_TYPE, ResearchRequest(question=QUESTION), id=run_id("keyless"),
                                            task_queue=TASK_QUEUE, result_type=ResearchResult)
        message = await failed_task_message(handle)
        assert "DEERFLOW_ENCRYPTION_KEYS" in message, message
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        told = starter_status(dev_server, keyed_env, handle.id)  # `status` says why the run waits
        assert told.returncode == 2 and "Traceback" not in told.stderr, told
        assert "workflow task failed on a worker and is being retried" in told.stderr, told
        assert "DEERFLOW_ENCRYPTION_KEYS" in told.stderr, told
    finally:
        keyless.stop()
    log = keyless_log.read_text()
    assert "Encryption: no keys (DEERFLOW_ENCRYPTION_KEYS is not set)" in log, log
    assert "ERROR runtime.encryption: An encrypted payload (key id 'k2026') reached a process without" in log, log

    keyed_log = tmp_path / "keyed.log"
    worker = await start_worker(dev_server, keyed, keyed_log, **keyed_env)
    try:
        await awaiting_review(handle)

        status = starter_status(dev_server, plain, handle.id)  # a client without the keys
        assert status.returncode == 2, status
        assert status.stdout == "" and "Traceback" not in status.stderr, status
        assert len(status.stderr.strip().splitlines()) == 1 and "DEERFLOW_ENCRYPTION_KEYS" in status.stderr, status

        await handle.execute_update("review_plan", "[ACCEPTED]")
        assert (await handle.result()).outcome is Outcome.REPORT
    finally:
        worker.stop()
    assert "Encryption: key ids k2026 (active), k2025" in keyed_log.read_text()
