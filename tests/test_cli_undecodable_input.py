"""A question, an edit or an ID of bytes that are not UTF-8, given to ``starter.py`` (issue #42).

Python decodes such an argument (and standard input, in UTF-8 mode) with ``surrogateescape``, so the
text holds lone surrogates, which no payload can carry: ``starter.py run`` refused the question as
"Input should be a valid string", and strict standard input failed with a traceback. With a dev
server and the real CLI as a cold process (its standard streams as Python sets them up, not the
zygote's): the run starts with each byte read as U+FFFD (``surrogateescape``: the C.UTF-8 locale,
UTF-8 mode); standard input read strictly (``PYTHONIOENCODING=utf-8:strict``) that is not UTF-8 is
one line and exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.support.processes import REPO_DIR, DevServer

pytestmark = pytest.mark.timeout(300)

QUESTION = b"Are caf\xe9 \xed\xa0\x80 prices rising?"  # Latin-1, and an encoded surrogate


def cli(dev_server: DevServer, home: Path, *args: str | bytes, stdin: bytes = b"",
        **env: str) -> subprocess.CompletedProcess[bytes]:
    environment = {"PATH": "/usr/bin:/bin", "DEERFLOW_HOME": str(home), "DEERFLOW_CONF": str(home / "absent.yaml"),
                   "TEMPORAL_ADDRESS": dev_server.address, "LANG": "C.UTF-8", **env}
    return subprocess.run([sys.executable, os.fsencode(REPO_DIR / "starter.py"), *map(os.fsencode, args)],
                          input=stdin, env=environment, cwd=home, capture_output=True, timeout=120, check=False)


async def started_question(client: Client, run_id: str) -> str:
    history = await client.get_workflow_handle(run_id).fetch_history()
    start = history.events[0].workflow_execution_started_event_attributes
    return (await client.data_converter.decode(start.input.payloads, [dict]))[0]["question"]


@pytest.mark.parametrize("given", ["argument", "stdin"])
async def test_a_question_of_other_bytes_starts_its_run_with_replacement_characters(
    given: str, dev_server: DevServer, client: Client, tmp_path: Path
) -> None:
    run_id = f"undecodable-{given}"
    if given == "argument":
        done = cli(dev_server, tmp_path, "run", QUESTION, "--no-wait", "--id", run_id)
    else:
        done = cli(dev_server, tmp_path, "run", "-", "--no-wait", "--id", run_id, stdin=QUESTION)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-3000:]
    assert done.stdout.decode("utf-8").strip() == run_id
    assert await started_question(client, run_id) == "Are caf\ufffd \ufffd\ufffd\ufffd prices rising?"


def test_standard_input_that_is_not_utf_8_is_one_line_and_exit_2(dev_server: DevServer, tmp_path: Path) -> None:
    done = cli(dev_server, tmp_path, "run", "-", "--no-wait", stdin=QUESTION, PYTHONIOENCODING="utf-8:strict")
    assert done.returncode == 2
    assert done.stderr.decode("utf-8").startswith("Error: Cannot read the question from standard input: ")
    assert len(done.stderr.splitlines()) == 1
