"""The ``python_repl_tool`` sandbox against ordinary and hostile snippets.

Every hostile snippet is written so that a broken guard cannot hurt the machine: the fork bomb
and the 10 GiB allocation first check that their limit is in force and refuse otherwise, every
run has a wall-clock timeout, and a fixture SIGKILLs (by pid) any sandbox process left behind.
Assertions that depend on containment this machine cannot provide are skipped with the reason
``SandboxActivities.mode()`` found.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import sandbox.activity as sandbox_activity
from config.settings import Settings
from sandbox.activity import REFUSED, SandboxActivities, SandboxMode
from sandbox.bootstrap import BOOT_MARKER
from sandbox.errors import SandboxStartError
from sandbox.runner import PLAIN, SandboxLimits
from sandbox.uids import UID_POOL_SIZE
from workflows.contracts.tool_activities import PythonRequest, PythonResult
from workflows.research.tool_format import format_python_result

REPO_DIR = Path(__file__).resolve().parent.parent
OWN_UID_BASE = int(os.environ["DEERFLOW_SANDBOX_UID_BASE"])  # this pytest process's pool (tests/support/isolation.py)
OWN_TMP = tempfile.gettempdir()  # and its temp directory, where its runs' work directories live
SECRET = "sk-secret-" + uuid.uuid4().hex[:8]
# What sandbox/runner.py reports for a bootstrap that failed a step (sandbox/bootstrap.py's _report).
NOT_ROOT = ("the sandbox could not start the code (isolated mode): creating the namespaces: "
            "OSError: [Errno 1] unshare failed: Operation not permitted")
SHORTAGE = ("the sandbox could not start the code (isolated mode): starting the code's process: "
            "BlockingIOError: [Errno 11] Resource temporarily unavailable")

FORK_BOMB = """\
import os, resource, sys
soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
caps = int(open("/proc/self/status").read().split("CapEff:")[1].split()[0], 16)
if os.getuid() == 0 or caps or soft == resource.RLIM_INFINITY or soft > 256:
    sys.exit(f"refusing to fork: no process limit in force (uid {os.getuid()}, NPROC {soft}, caps {caps:x})")
while True:
    os.fork()
"""

BIG_ALLOCATION = """\
import resource, sys
soft, _ = resource.getrlimit(resource.RLIMIT_AS)
if soft == resource.RLIM_INFINITY or soft > 4 * 1024**3:
    sys.exit(f"refusing to allocate: no memory limit in force (RLIMIT_AS {soft})")
b = bytearray(10 * 1024**3)
print("allocated", len(b))
"""


def sandbox_pids() -> list[int]:
    """Processes of this pytest process's sandbox runs: its pool's uids, the bootstrap (its marker
    and, hex-encoded in its configuration, this process's temp directory), or a snippet's work dir
    there. Another process's runs are not ours to count or kill."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            uid = entry.stat().st_uid
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        in_pool = OWN_UID_BASE <= uid < OWN_UID_BASE + UID_POOL_SIZE
        bootstrap = BOOT_MARKER.encode() in cmdline and OWN_TMP.encode().hex().encode() in cmdline
        if in_pool or bootstrap or f"{OWN_TMP}/deerflow-py-".encode() in cmdline:
            found.append(int(entry.name))
    return found


def snippet_running() -> bool:
    """The snippet's own process (not only the bootstrap) exists."""
    for pid in sandbox_pids():
        try:
            if b"/deerflow-py-" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def settled_sandbox_pids(seconds: float = 5.0) -> list[int]:
    """Leftovers, after giving the kernel a moment to finish killing (a loaded machine's moment:
    a snippet that escaped would sleep for a minute)."""
    deadline = time.monotonic() + seconds
    while (pids := sandbox_pids()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


@pytest.fixture(autouse=True)
def _kill_leftovers() -> Iterator[None]:
    """Backstop: a test whose guard broke must not leave sandbox processes on the machine."""
    yield
    for pid in sandbox_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


# The module's sandbox, with the default settings but this process's uid pool: probed once, like a worker's.
SANDBOX = SandboxActivities(Settings(DEERFLOW_SANDBOX_UID_BASE=OWN_UID_BASE))


@pytest.fixture
async def mode() -> SandboxMode:
    found = await SANDBOX.mode()
    if found.name == REFUSED:
        pytest.skip(f"this machine cannot contain the code, so the sandbox refuses: {found.reason}")
    return found


async def run(
    code: str, timeout: float = 10.0, env: ActivityEnvironment | None = None, sandbox: SandboxActivities = SANDBOX
) -> PythonResult:
    request = PythonRequest(code=code, timeout_seconds=timeout)
    # A hard outer limit, should the activity's own timeout be broken.
    return await asyncio.wait_for((env or ActivityEnvironment()).run(sandbox.python_repl_tool, request), timeout + 20)


# ---------------------------------------------------------------- ordinary code


async def test_prints_output(mode: SandboxMode) -> None:
    result = await run("print(6 * 7)")
    assert (result.stdout, result.stderr, result.exit_code, result.stopped) == ("42\n", "", 0, None)
    assert format_python_result(result) == "Successfully executed.\nStdout:\n42"


async def test_exception_is_a_result_with_traceback(mode: SandboxMode) -> None:
    result = await run("def f():\n    raise ValueError('boom')\nf()")
    assert result.exit_code == 1 and result.stopped is None
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().endswith("ValueError: boom")
    assert format_python_result(result).startswith("Error: exit code 1\n")


async def test_standard_library_and_work_dir_are_usable(mode: SandboxMode) -> None:
    code = ("import json, os, statistics, tempfile\n"
            "open('data.json', 'w').write(json.dumps([1, 2, 3, 4]))\n"
            "with tempfile.NamedTemporaryFile() as scratch:\n"
            "    scratch.write(b'ok')\n"
            "print(statistics.mean(json.load(open('data.json'))), os.getcwd() == os.environ['HOME'])")
    result = await run(code)
    assert result.stdout == "2.5 True\n", result.stderr


async def test_concurrent_runs_get_different_uids(mode: SandboxMode) -> None:
    if mode.name == PLAIN:
        pytest.skip(f"the sandbox does not switch uids in {mode.name!r} mode: {mode.reason}")
    code = "import os, time\ntime.sleep(0.3)\nprint(os.getuid())"
    first, second = await asyncio.gather(run(code), run(code))
    uids = {int(first.stdout), int(second.stdout)}
    assert len(uids) == 2 and all(OWN_UID_BASE <= uid < OWN_UID_BASE + UID_POOL_SIZE for uid in uids)


async def test_a_low_priority_worker_contains_code_at_its_own_niceness(mode: SandboxMode) -> None:
    """A worker started with ``nice -n 15`` (a batch host, ``nice make demo``): its sandbox works, and
    the code runs at least as nice as the worker (never raised above it, which needs a privilege)."""
    worker_niceness = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 15)
    code = "import os\nprint(os.getpriority(os.PRIO_PROCESS, 0), os.getuid())"
    process = await asyncio.create_subprocess_exec(
        "nice", "-n", "15", sys.executable, "-m", "tests.support.sandbox_driver", cwd=REPO_DIR,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(process.communicate(json.dumps([code]).encode()), 120)
    assert process.returncode == 0, stderr.decode()[-3000:]
    report = json.loads(stdout.decode().strip().splitlines()[-1])
    assert report["mode"] == mode.name, report["reason"]
    [result] = report["results"]
    niceness, uid = map(int, result["stdout"].split())
    assert niceness == max(10, worker_niceness), result
    assert (uid != os.getuid()) == (mode.name != PLAIN)


# ---------------------------------------------------------------- limits


async def test_infinite_loop_is_stopped_at_the_timeout(mode: SandboxMode) -> None:
    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    started = time.monotonic()
    result = await run("while True:\n    pass", timeout=2.0, env=env)
    elapsed = time.monotonic() - started
    assert result.stopped == "timeout"
    assert elapsed < 2.9, f"stopping took {elapsed:.1f} s"
    assert beats, "no heartbeat while the code ran"
    assert settled_sandbox_pids() == []
    assert format_python_result(result, timeout_seconds=2).startswith(
        "Error: the sandbox stopped the code: it exceeded the 2 s time limit")


async def test_output_before_a_timeout_is_kept(mode: SandboxMode) -> None:
    result = await run("import time\nprint('progress 1')\ntime.sleep(30)", timeout=1.0)
    assert result.stopped == "timeout" and result.stdout == "progress 1\n"


async def test_ten_gib_allocation_is_a_memory_stop(mode: SandboxMode) -> None:
    started = time.monotonic()
    result = await run(BIG_ALLOCATION)
    assert "refusing" not in result.stderr, result.stderr
    assert result.stopped == "memory" and "MemoryError" in result.stderr
    assert time.monotonic() - started < 5
    assert "ran out of memory" in format_python_result(result)


@pytest.mark.timeout(60)
async def test_fork_bomb_is_contained_and_leaves_nothing(mode: SandboxMode) -> None:
    if mode.name == PLAIN and os.geteuid() == 0:
        pytest.skip("plain mode as root: RLIMIT_NPROC does not bind root, so the bomb is not run")
    result = await run(FORK_BOMB, timeout=5.0)
    assert "refusing" not in result.stderr, result.stderr
    assert result.stopped == "timeout" or "BlockingIOError" in result.stderr
    assert settled_sandbox_pids() == []


async def test_cpu_limit_is_reported(monkeypatch: pytest.MonkeyPatch, mode: SandboxMode) -> None:
    """A 1 s CPU limit (normally timeout + 1 s, reached only by GIL-free threads)."""
    rlimits = SandboxLimits.rlimits

    def one_second_cpu(self: SandboxLimits, timeout: float) -> dict[str, list[int]]:
        return {**rlimits(self, timeout), "cpu": [1, 2]}

    monkeypatch.setattr(SandboxLimits, "rlimits", one_second_cpu)
    result = await run("while True:\n    pass", timeout=15.0)
    assert result.stopped == "cpu", result
    assert "CPU time limit" in format_python_result(result)


async def test_huge_output_is_truncated_and_stopped(mode: SandboxMode) -> None:
    result = await run("print('x' * 10_000_000)")
    assert result.stopped == "output"
    assert "[output truncated:" in result.stdout and len(result.stdout) < 70_000
    assert "printed more output" in format_python_result(result)


async def test_long_output_keeps_head_and_tail(mode: SandboxMode) -> None:
    result = await run("print('START' + 'a' * 200_000 + 'END')")
    assert result.stopped is None and result.exit_code == 0
    assert result.stdout.startswith("START") and result.stdout.endswith("END\n")
    assert "[output truncated:" in result.stdout and len(result.stdout) < 70_000


# ---------------------------------------------------------------- isolation


async def test_api_keys_are_not_visible(monkeypatch: pytest.MonkeyPatch, mode: SandboxMode) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("TAVILY_API_KEY", SECRET)
    targets = ['"self"']
    if mode.name != PLAIN:  # in plain mode the code runs as the worker's user: /proc is readable
        targets += ["os.getppid()", "1", str(os.getpid())]
    code = "import os\nprint(dict(os.environ))\n" + "".join(
        f"try:\n    print(open(f'/proc/{{{target}}}/environ').read())\n"
        f"except OSError as error:\n    print('unreadable', error)\n" for target in targets)
    result = await run(code)
    assert result.exit_code == 0, result.stderr
    assert "'PATH': '/usr/bin:/bin'" in result.stdout
    assert SECRET not in result.stdout + result.stderr
    assert "OPENAI_API_KEY" not in result.stdout


async def test_writes_outside_the_work_dir_fail(mode: SandboxMode) -> None:
    if mode.name == PLAIN:
        pytest.skip(f"the code runs as the worker's user in {mode.name!r} mode: {mode.reason}")
    name = f"sandbox-escape-{uuid.uuid4().hex}"
    targets = [REPO_DIR / name, Path("/tmp") / name]
    code = "".join(f"try:\n    open({str(t)!r}, 'w').write('x')\n    print('WROTE')\n"
                   f"except OSError as error:\n    print('denied', error.errno)\n" for t in targets)
    try:
        result = await run(code + "open('mine.txt', 'w').write('x')\nprint('own dir ok')")
        assert "WROTE" not in result.stdout
        assert result.stdout.count("denied") == len(targets) and "own dir ok" in result.stdout
    finally:
        leaked = [t for t in targets if t.exists()]
        for path in leaked:
            path.unlink()
    assert leaked == []


async def test_no_connection_to_a_local_listener(mode: SandboxMode) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.3)
        port = listener.getsockname()[1]
        code = ("import socket\ntry:\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=3).close()\n"
                "    print('connected')\nexcept OSError as error:\n    print('no connection:', error)")
        result = await run(code)
        assert result.exit_code == 0, result.stderr
        if mode.name == PLAIN:
            pytest.skip(f"no network namespace in {mode.name!r} mode: {mode.reason}")
        assert result.stdout.startswith("no connection:")
        with pytest.raises(TimeoutError):
            listener.accept()


async def test_cancellation_kills_the_sandbox(mode: SandboxMode) -> None:
    env = ActivityEnvironment()
    task = asyncio.create_task(run("import time\ntime.sleep(60)", timeout=60.0, env=env))
    deadline = time.monotonic() + 10
    while not snippet_running():
        assert time.monotonic() < deadline, "the snippet never started"
        await asyncio.sleep(0.05)
    env.cancel()
    with pytest.raises(asyncio.CancelledError) as cancelled:
        await task
    # ``cancelled`` keeps the activity's frames, and so its subprocess transport, alive: the
    # sandbox must be gone because the activity killed it, not because asyncio's finaliser did.
    assert settled_sandbox_pids() == []
    del cancelled


async def test_work_dir_has_a_disk_cap(mode: SandboxMode) -> None:
    if mode.name == PLAIN:
        pytest.skip("plain mode writes to the host's disk; only RLIMIT_FSIZE caps each file")
    code = ("written = 0\ntry:\n    for i in range(100):\n"
            "        with open(f'fill{i}', 'wb') as f:\n            f.write(b'x' * 8_000_000)\n"
            "        written += 8_000_000\nexcept OSError as error:\n    print('full', error.errno)\n"
            "print(written)")
    result = await run(code)
    assert result.stdout.startswith("full 28"), result  # ENOSPC
    assert int(result.stdout.split()[-1]) <= SandboxLimits().disk_bytes


# ---------------------------------------------------------------- modes


@pytest.mark.parametrize("configured", ["unprivileged", "bogus"])
async def test_an_unknown_mode_refuses_every_call(configured: str, caplog: pytest.LogCaptureFixture) -> None:
    sandbox = SandboxActivities(Settings(DEERFLOW_SANDBOX_MODE=configured, DEERFLOW_SANDBOX_UID_BASE=OWN_UID_BASE))
    assert (await sandbox.self_check()).name == REFUSED
    assert "python_repl_tool will refuse every call" in caplog.text
    with pytest.raises(ApplicationError) as refused:
        await run("print('ran')", sandbox=sandbox)
    assert refused.value.type == "SandboxError" and refused.value.non_retryable
    assert f"DEERFLOW_SANDBOX_MODE={configured!r} is not a mode" in str(refused.value)
    assert "DEERFLOW_SANDBOX_MODE=plain" in str(refused.value)  # says how to opt in


async def test_plain_mode_is_an_explicit_and_loud_opt_in(caplog: pytest.LogCaptureFixture) -> None:
    sandbox = SandboxActivities(Settings(DEERFLOW_SANDBOX_MODE="plain", DEERFLOW_SANDBOX_UID_BASE=OWN_UID_BASE))
    assert (await sandbox.self_check()).name == PLAIN
    assert "python_repl_tool sandbox is OFF" in caplog.text
    result = await run("import os\nprint(os.getuid())", sandbox=sandbox)
    assert result.stdout == f"{os.getuid()}\n"  # the worker's own user: no containment, as consented


async def test_a_failing_isolation_probe_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a non-root worker: the probe fails, and nothing falls back to running uncontained."""
    calls = []

    async def not_root(code: str, *args: object) -> PythonResult:
        calls.append(code)
        raise SandboxStartError(NOT_ROOT, lasting=True)

    monkeypatch.setattr(sandbox_activity, "execute", not_root)
    sandbox = SandboxActivities(Settings(DEERFLOW_SANDBOX_UID_BASE=OWN_UID_BASE))
    for _ in range(2):
        with pytest.raises(ApplicationError) as refused:
            await run("print('ran')", sandbox=sandbox)
        assert refused.value.non_retryable
        assert f"the isolated sandbox does not work here ({NOT_ROOT})" in str(refused.value)
        assert "SYS_ADMIN" in str(refused.value)  # what the worker lacks, and how to grant it
    assert len(calls) == 1  # a missing privilege lasts: probed once, the refusal kept


async def test_a_passing_shortage_is_retried_and_probed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cause that may pass (no memory for the bootstrap, say) fails that call retryably, names
    itself without blaming privileges, and the next call probes again instead of refusing for good."""
    real_execute = sandbox_activity.execute
    shortages = [SandboxStartError(SHORTAGE, lasting=False)]

    async def short_once(*args: Any) -> PythonResult:
        if shortages:
            raise shortages.pop()
        return await real_execute(*args)

    monkeypatch.setattr(sandbox_activity, "execute", short_once)
    sandbox = SandboxActivities(Settings(DEERFLOW_SANDBOX_UID_BASE=OWN_UID_BASE))
    with pytest.raises(ApplicationError) as failed:
        await run("print('ran')", sandbox=sandbox)
    assert not failed.value.non_retryable and failed.value.type == "SandboxError"
    assert SHORTAGE in str(failed.value) and "SYS_ADMIN" not in str(failed.value)
    assert (await sandbox.mode()) == await SANDBOX.mode()  # probed again: what this machine can do


# ---------------------------------------------------------------- the tool message


@pytest.mark.parametrize(("result", "expected"), [
    (PythonResult(stdout="1\n", exit_code=0), "Successfully executed.\nStdout:\n1"),
    (PythonResult(exit_code=0), "Successfully executed.\nStdout: (nothing was printed; use print() to see values)"),
    (PythonResult(stderr="Traceback ...\nKeyError: 'x'\n", exit_code=1),
     "Error: exit code 1\nStderr:\nTraceback ...\nKeyError: 'x'"),
    (PythonResult(exit_code=-11), "Error: the code was killed by signal SIGSEGV.\n"
                                  "Stdout: (nothing was printed; use print() to see values)"),
    (PythonResult(stdout="partial\n", exit_code=-9, stopped="timeout", duration_seconds=30.02),
     "Error: the sandbox stopped the code: it exceeded its time limit (stopped after 30 s).\nStdout:\npartial"),
])
def test_format_python_result(result: PythonResult, expected: str) -> None:
    assert format_python_result(result) == expected
    assert format_python_result(result).startswith("Error") == (result.exit_code != 0 or bool(result.stopped))
