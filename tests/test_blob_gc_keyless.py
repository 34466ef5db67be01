"""``blobs gc`` on a deployment without encryption keys (issue #42 §6).

Anyone who may start workflows can start one of a made-up type whose input is ciphertext no key
opens. It used to stop every collection ("History holds encrypted payloads"), so one such workflow
disabled blob clean-up for good. Now what gc cannot read in a workflow that is not ours is skipped
and listed, and the orphan goes; a run of ours holding ciphertext still stops it (refuse rather than
guess: its worker's own payloads are ciphertext too, and gc has no keys to read them).

A module of its own: the run of ours left holding ciphertext would stop every other gc test's
collection on a shared dev server.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter

from runtime.connection import connect_when_ready
from runtime.encryption import EncryptionCodec
from tests.support.processes import DevServer, run_starter
from tests.support.runs import run_id
from workflows.contracts.research import WORKFLOW_TYPE

pytestmark = pytest.mark.timeout(180)


def ciphertext_no_key_opens() -> Payload:
    [plain] = pydantic_data_converter.payload_converter.to_payloads([{"question": "x"}])
    return EncryptionCodec({"someone-elses": os.urandom(32)})._encrypt(plain)


def orphan_blob(home: Path) -> Path:
    """A blob no run names, old enough to go."""
    orphan = home / "blobs" / "ab" / ("ab" + "0" * 62)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"no run names this")
    os.utime(orphan, (0, 0))
    return orphan


async def test_keyless_gc_skips_a_foreign_workflows_ciphertext_and_refuses_ours(dev_server: DevServer,
                                                                                tmp_path: Path) -> None:
    outsider: Client = await connect_when_ready(dev_server.address)  # no keys, no codec: payloads go as given
    env = {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "DEERFLOW_HOME": str(tmp_path),
           "DEERFLOW_PAYLOAD_STORE": "filesystem", "DEERFLOW_ENCRYPTION_KEYS": "", "DEERFLOW_ENCRYPTION_KEY_FILE": ""}
    foreign = await outsider.start_workflow("MadeUpWorkflow", RawValue(ciphertext_no_key_opens()),
                                            id=run_id("made-up"), task_queue=run_id("nobody-polls"))
    orphan = orphan_blob(tmp_path)

    done = run_starter(env, "blobs", "gc", "--older-than", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "Deleted 1 blob(s)" in done.stdout and "Skipped 1 payload(s)" in done.stdout, done.stdout
    assert f"{foreign.id} (MadeUpWorkflow), event 1 (workflow_execution_started): an encrypted payload" \
        in done.stdout, done.stdout
    assert not orphan.exists()

    ours = await outsider.start_workflow(WORKFLOW_TYPE, RawValue(ciphertext_no_key_opens()),
                                         id=run_id("ours"), task_queue=run_id("nobody-polls"))
    orphan = orphan_blob(tmp_path)
    try:
        refused = run_starter(env, "blobs", "gc", "--older-than", "1")
    finally:
        await ours.terminate()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip() == ("Error: History holds encrypted payloads: run blobs gc with the workers' "
                                      "DEERFLOW_ENCRYPTION_KEYS (or key file). Nothing was deleted.")
    assert orphan.exists(), "a run of ours it cannot read: nothing is deleted"
