"""A worker whose event loop stalls ends itself, saying where it was stuck, and its runs go on.

The watchdog (runtime/stall_watchdog.py) is checked in small processes of its own (it ends the
process it runs in, so never in the test process), then in a real ``worker.py`` whose loop a test
signal wedges mid-run: the worker must leave with every thread's traceback in its log, and a new
worker must finish the run it held.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from temporalio.client import Client, WorkflowExecutionStatus

from offline.providers import without_provider_settings
from runtime.embedded import process_polls
from tests.support.processes import REPO_DIR, DevServer, WorkerProcess, kill_group, wait_for_worker
from tests.support.runs import start
from tests.support.zygote import ForkedProcess, zygote

# A slow demo model, so the run is mid-flight when its worker's loop is wedged.
MODEL_LATENCY = "1.0"
# The wedged worker's stall: far above its loop's lag on a loaded host (it re-arms every 2.5 s).
WORKER_STALL_SECONDS = 10


def run_script(body: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``body`` (given ``asyncio``, ``time`` and ``exit_if_stalled``) in a new interpreter."""
    script = "import asyncio, time\nfrom runtime.stall_watchdog import exit_if_stalled\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], cwd=REPO_DIR, capture_output=True, text=True,
                          timeout=timeout)


def test_a_wedged_loop_ends_the_process_with_every_threads_traceback() -> None:
    started = time.monotonic()
    result = run_script("""
        def wedge_the_loop():
            time.sleep(120)

        async def main():
            asyncio.create_task(exit_if_stalled(1.0))
            await asyncio.sleep(0.5)
            wedge_the_loop()

        asyncio.run(main())
    """)
    assert result.returncode == 1, result
    assert "Timeout (0:00:01.250000)!" in result.stderr  # the stall and one re-arm
    assert "in wedge_the_loop" in result.stderr  # where the loop was stuck
    assert time.monotonic() - started < 60


def test_a_loop_that_runs_is_never_ended() -> None:
    """Awake far longer than the stall, the loop re-arms the timer before it runs out."""
    result = run_script("""
        async def main():
            asyncio.create_task(exit_if_stalled(3.0))
            await asyncio.sleep(8)
            print("still here")

        asyncio.run(main())
    """)
    assert result.returncode == 0, result
    assert result.stdout == "still here\n"


def test_a_stopped_watchdog_and_a_zero_stall_watch_nothing() -> None:
    """Once cancelled (the worker leaving) or set to 0 (the operator's choice), a long blocking call
    is the process's own business."""
    result = run_script("""
        async def main():
            watchdog = asyncio.create_task(exit_if_stalled(1.0))
            await asyncio.sleep(0.5)
            watchdog.cancel()
            await asyncio.sleep(0)
            await exit_if_stalled(0)
            time.sleep(3)
            print("done")

        asyncio.run(main())
    """)
    assert result.returncode == 0, result
    assert result.stdout == "done\n"


WEDGEABLE_WORKER = """\
import runpy, signal, sys, time

def wedge_the_event_loop(signum, frame):
    time.sleep(3600)  # runs on the main thread, the event loop's: nothing else runs on it

signal.signal(signal.SIGUSR1, wedge_the_event_loop)
sys.argv = [{worker!r}]
runpy.run_path({worker!r}, run_name="__main__")
"""


def start_wedgeable_worker(dev_server: DevServer, tmp_path: Path, log: Path) -> ForkedProcess:
    """The real ``worker.py`` (forked from the zygote), whose event loop SIGUSR1 wedges for good."""
    script = tmp_path / "wedgeable_worker.py"
    script.write_text(WEDGEABLE_WORKER.format(worker=str(REPO_DIR / "worker.py")))
    env = {**without_provider_settings(os.environ), "DEERFLOW_ENV_FILE": os.devnull,
           "TEMPORAL_ADDRESS": dev_server.address, "DEERFLOW_HOME": str(tmp_path / "home"),
           "DEERFLOW_OFFLINE_MODEL_LATENCY": MODEL_LATENCY,
           "DEERFLOW_WORKER_STALL_SECONDS": str(WORKER_STALL_SECONDS)}
    with log.open("ab") as out:
        return zygote().spawn(script, [], env=env, cwd=REPO_DIR, stdout=out, stderr=out)


async def test_a_worker_whose_loop_is_wedged_leaves_and_its_run_finishes_on_the_next(
        dev_server: DevServer, client: Client, tmp_path: Path) -> None:
    log = tmp_path / "wedged.log"
    wedged = start_wedgeable_worker(dev_server, tmp_path, log)
    try:
        deadline = time.monotonic() + 60
        while not await process_polls(client, wedged.pid):
            assert wedged.poll() is None and time.monotonic() < deadline, log.read_text()
            await asyncio.sleep(0.2)
        handle = await start(client, auto_accept_plan=True)
        await asyncio.sleep(3)  # into the run's first model calls
        wedged.send_signal(signal.SIGUSR1)
        wedged_at = time.monotonic()
        while wedged.poll() is None:
            assert time.monotonic() - wedged_at < WORKER_STALL_SECONDS + 60, "the wedged worker never left"
            await asyncio.sleep(0.2)
        left_after = time.monotonic() - wedged_at
        print(f"the wedged worker left {left_after:.1f} s after its loop stalled")
        assert wedged.poll() == 1
        text = log.read_text(errors="replace")
        assert "Timeout (0:00:12.500000)!" in text  # its stall and one re-arm
        assert "in wedge_the_event_loop" in text
        assert f"Stall watchdog: an event loop stuck for {WORKER_STALL_SECONDS} s ends this process" in text
        assert left_after >= WORKER_STALL_SECONDS
    finally:
        if wedged.poll() is None:
            kill_group(wedged.pid)

    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    next_worker = WorkerProcess(dev_server.address, tmp_path / "next.log",
                                env={"DEERFLOW_HOME": str(tmp_path / "home")}).start()
    try:
        await wait_for_worker(client, tmp_path / "next.log")
        result = await asyncio.wait_for(handle.result(), 180)
        assert result.report
    finally:
        next_worker.stop()
