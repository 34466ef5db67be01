"""The test harness's zygote (tests/support/zygote.py) runs a script as ``python SCRIPT ARGS`` would.

Most end-to-end tests start their workers, API servers and CLI commands through it, so what they
prove holds only if a forked child is that process: the script as ``__main__`` with its arguments,
the test's environment, working directory and streams, a session of its own (so a test's
``killpg`` reaches it and nothing else), and an exit status a test can read as ``Popen``'s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.zygote import Zygote, zygote

REPORT = """\
import json, os, sys
print(json.dumps({"name": __name__, "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                  "marker": os.environ.get("ZYGOTE_MARKER"), "home": os.environ.get("HOME"),
                  "own_session": os.getsid(0) == os.getpid(), "niceness": os.nice(0),
                  "open": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def report_script(tmp_path: Path) -> Path:
    script = tmp_path / "scripts" / "report.py"
    script.parent.mkdir()
    script.write_text(REPORT)
    return script


def test_a_forked_child_is_the_script_run_as_main_with_the_tests_environment(report_script: Path,
                                                                              tmp_path: Path) -> None:
    done = zygote().run(report_script, ["3", "--flag"], env={"ZYGOTE_MARKER": "here"}, cwd=tmp_path, timeout=60)
    seen = json.loads(done.stdout)
    assert done.returncode == 3 and done.stderr == "to stderr\n"
    assert seen["name"] == "__main__" and seen["argv"] == [str(report_script), "3", "--flag"]
    assert seen["cwd"] == str(tmp_path) and seen["path0"] == str(report_script.parent)
    # Only what the test gave: nothing of the zygote's environment, no descriptor beyond the streams
    # (the last one listed is the one listdir opened to read the list).
    assert seen["marker"] == "here" and seen["home"] is None
    assert seen["own_session"] and seen["open"][:3] == [0, 1, 2] and len(seen["open"]) == 4


def test_its_niceness_and_streams_are_the_ones_asked_for(report_script: Path, tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    with log.open("wb") as output:
        child = zygote().spawn(report_script, ["0"], env={}, cwd=tmp_path, stdout=output, stderr=output, niceness=2)
    assert child.wait(timeout=60) == 0
    first, second = log.read_text().splitlines()
    # Added to the test process's own, as `nice -n 2` does: the kernel caps it at 19 (the suite may run
    # at nice 15).
    assert json.loads(first)["niceness"] == min(os.nice(0) + 2, 19) and second == "to stderr"


def test_signals_reach_the_child_and_its_end_reads_as_popens(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text("import time\ntime.sleep(60)\n")
    child = zygote().spawn(script, [], env={}, cwd=tmp_path)
    assert child.poll() is None
    for timeout in (0, 0.2):
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=timeout)
    os.killpg(child.pid, signal.SIGKILL)  # its own session: the group is the child's alone
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert child.poll() == -signal.SIGKILL


def test_an_uncaught_exception_is_printed_and_exits_1_and_a_slow_command_is_killed(tmp_path: Path) -> None:
    failing = tmp_path / "failing.py"
    failing.write_text("raise ValueError('broken on purpose')\n")
    done = zygote().run(failing, [], env={}, cwd=tmp_path, timeout=60)
    assert done.returncode == 1 and "ValueError: broken on purpose" in done.stderr
    slow = tmp_path / "slow.py"
    slow.write_text("import time\ntime.sleep(60)\n")
    began = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        zygote().run(slow, [], env={}, cwd=tmp_path, timeout=0.5)
    assert time.monotonic() - began < 30


def test_a_child_finds_the_worker_and_the_model_libraries_already_imported(tmp_path: Path) -> None:
    """The point of the zygote: the seconds of imports are paid once, not by every child."""
    script = tmp_path / "probe.py"
    script.write_text("import sys\nprint(all(m in sys.modules for m in ('worker', 'starter', 'langchain_openai')))\n")
    assert zygote().run(script, [], env={}, cwd=tmp_path, timeout=60).stdout == "True\n"


def test_many_requests_at_once_each_get_their_own_child_and_a_killed_zygote_is_named(tmp_path: Path) -> None:
    """Its own zygote (the test process's shared one serves other tests): 24 commands at once from
    threads, as the front-door tests run them, each answered with its own output; then the zygote
    is killed while a child runs: waiting for that child says so instead of hanging."""
    own = Zygote()
    try:
        echo = tmp_path / "echo.py"
        echo.write_text("import os, sys\nprint(sys.argv[1], os.getpid())\n")
        with ThreadPoolExecutor(max_workers=24) as pool:
            done = list(pool.map(lambda n: own.run(echo, [str(n)], env={}, cwd=tmp_path, timeout=120), range(24)))
        assert [result.stdout.split()[0] for result in done] == [str(n) for n in range(24)]
        assert len({result.stdout.split()[1] for result in done}) == 24 and {r.returncode for r in done} == {0}
        sleeper = tmp_path / "sleeper.py"
        sleeper.write_text("import time\ntime.sleep(60)\n")
        child = own.spawn(sleeper, [], env={}, cwd=tmp_path)
        own.process.kill()
        with pytest.raises(RuntimeError, match="the zygote left"):
            child.wait(timeout=30)
        os.killpg(child.pid, signal.SIGKILL)  # an orphan now, in its own session
    finally:
        own.process.kill()
        own.process.wait(timeout=30)
