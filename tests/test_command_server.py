"""The command server (cli/command_server.py, cli/command_client.py): a served command answers as one
run in the caller's own process would, with the caller's environment, directory and streams; the
caller's Ctrl-C reaches it and its exit status comes back; a caller that dies takes it along; a server
of older code hands the command back and is replaced; and nothing is sent to a socket in a folder
that is not this user's alone.

Each test runs ``python starter.py`` as a user does (a new interpreter, never the zygote, which would
skip the client), with the server turned on and a runtime folder of its own.
"""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.command_client import LAUNCH, MAX_ADDRESS_BYTES, ROOT, SWITCH
from runtime.build_info import MODULES, PACKAGES
from tests.support.processes import REPO_DIR, DevServer

WAIT = 120.0  # for a server to start or a log line to appear: generous, for a loaded machine


@pytest.fixture
def runtime_folder() -> Iterator[Path]:
    """A short ``XDG_RUNTIME_DIR`` of the test's own (a socket's path has 107 bytes at most)."""
    folder = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))
    yield folder
    for log in folder.glob("deerflow-cli-*/*.log"):  # the server leaves once its socket is gone
        for socket_path in [log.with_suffix("")]:
            socket_path.unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


def command_env(dev_server: DevServer, runtime_folder: Path, **more: str) -> dict[str, str]:
    return {**os.environ, "TEMPORAL_ADDRESS": dev_server.address, "XDG_RUNTIME_DIR": str(runtime_folder),
            SWITCH: "on", **more}


def starter(env: dict[str, str], *args: str, script: Path = REPO_DIR / "starter.py",
            cwd: Path = REPO_DIR) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], env=env, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=WAIT)


def server_log(runtime_folder: Path) -> Path:
    logs = list(runtime_folder.glob("deerflow-cli-*/*.log"))
    assert len(logs) <= 1, logs
    return logs[0] if logs else runtime_folder / "none.log"


def wait_for_line(runtime_folder: Path, fragment: str) -> str:
    """The server's log once a line holds ``fragment``."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        log = server_log(runtime_folder)
        text = log.read_text() if log.exists() else ""
        if fragment in text:
            return text
        time.sleep(0.1)
    raise AssertionError(f"no line with {fragment!r} in the server's log within {WAIT} s: {text!r}")


def serving_pid(runtime_folder: Path) -> int:
    line = next(line for line in wait_for_line(runtime_folder, "serving ").splitlines() if "serving " in line)
    return int(line.rsplit("(pid ", 1)[1].rstrip(")"))


def test_a_served_command_answers_as_one_run_here_and_down_stops_the_server(
        dev_server: DevServer, runtime_folder: Path) -> None:
    cold = command_env(dev_server, runtime_folder, **{SWITCH: "off"})
    served = command_env(dev_server, runtime_folder)
    expected = [starter(cold, "list"), starter(cold, "status", "no-such-run")]
    assert not list(runtime_folder.iterdir()), "a command with the server off started one"

    first = starter(served, "list")  # runs here, and starts a server for the next
    assert (first.returncode, first.stdout, first.stderr) == (0, expected[0].stdout, expected[0].stderr)
    pid = serving_pid(runtime_folder)
    folder = server_log(runtime_folder).parent
    assert folder.stat().st_mode & 0o777 == 0o700
    assert server_log(runtime_folder).with_suffix("").stat().st_mode & 0o777 == 0o600

    for args, want in zip([["list"], ["status", "no-such-run"]], expected, strict=True):
        got = starter(served, *args)
        assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)
    log = wait_for_line(runtime_folder, "status (pid ")
    assert "list (pid " in log
    assert "exit 2" in log  # the unknown run's status, as here
    assert serving_pid(runtime_folder) == pid, "one server served both"

    # A second server, started as a command that found the first still importing starts one: it leaves
    # at once (one that waited for the lock came back after `down`).
    second = subprocess.Popen([sys.executable, "-P", "-c", LAUNCH, str(REPO_DIR),
                               str(server_log(runtime_folder).with_suffix(""))], env=served,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    down = starter(served, "down")
    assert "command server" in down.stdout
    assert _ends_within(pid, 30)
    assert second.wait(timeout=WAIT) == 0, "a second server took the first's place after down"
    assert not server_log(runtime_folder).with_suffix("").exists()


def test_the_child_takes_the_callers_environment_and_working_directory(
        dev_server: DevServer, runtime_folder: Path, tmp_path: Path) -> None:
    """A settings file named (by a variable the server never had) relative to the caller's directory,
    with a bad value: the child reads it there and refuses it, as the command run here does."""
    served = command_env(dev_server, runtime_folder)
    assert starter(served, "list").returncode == 0
    serving_pid(runtime_folder)
    (tmp_path / "team.env").write_text("LOG_LEVEL=LOUD\n")
    got = starter({**served, "DEERFLOW_ENV_FILE": "team.env"}, "list", cwd=tmp_path)
    assert (got.returncode, got.stdout) == (2, "")
    assert got.stderr.startswith("Error: LOG_LEVEL='LOUD'") and f"({tmp_path / 'team.env'})" in got.stderr
    assert wait_for_line(runtime_folder, "exit 2")


def test_ctrl_c_reaches_the_served_command_and_a_killed_caller_takes_it_along(
        dev_server: DevServer, runtime_folder: Path) -> None:
    """A Temporal address that accepts and never answers holds the command; the caller's SIGINT ends
    it as Ctrl-C ends a command (exit 130, the hint), and SIGKILL of another caller hangs its child up.
    The server was started by a command that ignored SIGINT (``nohup``, a script's background job):
    its children must not inherit that. The signal is sent as soon as the child connects, so a
    loaded machine may deliver it before the caller has heard the child's pid."""
    served = command_env(dev_server, runtime_folder)
    started = subprocess.run(with_sigint("SIG_IGN", [sys.executable, str(REPO_DIR / "starter.py"), "list"]),
                             env=served, cwd=REPO_DIR, capture_output=True, stdin=subprocess.DEVNULL, timeout=WAIT)
    assert started.returncode == 0
    serving_pid(runtime_folder)
    for sig, expected in ((signal.SIGINT, "exit 130"), (signal.SIGKILL, f"exit -{int(signal.SIGHUP)}")):
        with held_command(served) as caller:
            caller.send_signal(sig)
            _, stderr = caller.communicate(timeout=WAIT)
        if sig == signal.SIGINT:
            assert (caller.returncode, "Interrupted." in stderr) == (130, True), stderr
        assert wait_for_line(runtime_folder, expected)


@contextlib.contextmanager
def held_command(served: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``starter.py list`` against a Temporal address that accepts and never answers, yielded once its
    child is connecting (so, running). It starts as a shell's foreground command: in a process group
    of its own, SIGINT not ignored, whatever this test process inherited (a suite started as a
    background job ignores it)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        held = {**served, "TEMPORAL_ADDRESS": f"127.0.0.1:{silent.getsockname()[1]}"}
        caller = subprocess.Popen(with_sigint("SIG_DFL", [sys.executable, str(REPO_DIR / "starter.py"), "list"]),
                                  env=held, cwd=REPO_DIR, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, process_group=0)
        try:
            silent.settimeout(WAIT)
            connection, _ = silent.accept()
            with connection:
                yield caller
        finally:  # a test that failed with its command held leaves no process behind
            if caller.poll() is None:
                caller.kill()
                caller.communicate()


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process: T when stopped, "gone" once it has been reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def becomes(pid: int, stopped: bool) -> bool:
    deadline = time.monotonic() + WAIT
    while (process_state(pid) == "T") != stopped:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_ctrl_z_stops_the_served_command_with_its_caller_and_fg_continues_both(
        dev_server: DevServer, runtime_folder: Path) -> None:
    """Ctrl-Z (SIGTSTP to the caller's process group) stops the child too, which would otherwise go on
    writing to the terminal beside the shell; ``fg`` (SIGCONT) continues both, and the command then
    ends as ever. A stopped caller killed (``kill -9 %1``) still takes its stopped child along."""
    served = command_env(dev_server, runtime_folder)
    assert starter(served, "list").returncode == 0
    server = serving_pid(runtime_folder)
    for then_kill in (False, True):
        with held_command(served) as caller:
            child = int(Path(f"/proc/{server}/task/{server}/children").read_text().split()[0])
            os.killpg(caller.pid, signal.SIGTSTP)
            assert becomes(caller.pid, stopped=True) and becomes(child, stopped=True)
            if then_kill:
                caller.kill()
                assert wait_for_line(runtime_folder, f"(pid {child}): exit -{int(signal.SIGHUP)}")
                continue
            os.killpg(caller.pid, signal.SIGCONT)
            assert becomes(child, stopped=False) and becomes(caller.pid, stopped=False)
            caller.send_signal(signal.SIGINT)
            _, stderr = caller.communicate(timeout=WAIT)
        assert (caller.returncode, "Interrupted." in stderr) == (130, True), stderr


def test_a_server_terminated_finishes_its_commands_and_one_killed_leaves_its_callers_waiting_for_them(
        dev_server: DevServer, runtime_folder: Path) -> None:
    """SIGTERM to the server while a command is held: the command still ends as its caller expects (Ctrl-C:
    130), and then the server leaves. SIGKILL: the command runs on without its server, and its caller
    waits for it to end (its output is the caller's) before it fails, the status being lost."""
    served = command_env(dev_server, runtime_folder)
    for server_signal in (signal.SIGTERM, signal.SIGKILL):
        assert starter(served, "list").returncode == 0
        server = serving_pid(runtime_folder)
        with held_command(served) as caller:
            os.kill(server, server_signal)
            time.sleep(1)
            assert caller.poll() is None, "the caller left while its command ran"
            caller.send_signal(signal.SIGINT)
            _, stderr = caller.communicate(timeout=WAIT)
        assert "Interrupted." in stderr, stderr
        if server_signal == signal.SIGTERM:
            assert caller.returncode == 130, stderr
            assert _ends_within(server, 30), "the terminated server stayed"
            assert not server_log(runtime_folder).with_suffix("").exists()
        else:
            assert caller.returncode == 1
            assert stderr.rstrip().endswith("its exit status is lost"), stderr


def test_a_server_of_older_code_hands_the_command_back_and_is_replaced(
        dev_server: DevServer, runtime_folder: Path, tmp_path: Path) -> None:
    """A copy of the product, so that touching a file changes no other test's checkout; then a library
    installed where its imports come from."""
    copy = tmp_path / "product"
    for name in PACKAGES:
        shutil.copytree(REPO_DIR / name, copy / name)
    for name in MODULES:
        shutil.copy2(REPO_DIR / name, copy / name)
    libraries = tmp_path / "libraries"  # a folder imports may come from, as site-packages
    libraries.mkdir()
    served = command_env(dev_server, runtime_folder, PYTHONPATH=str(libraries))
    script = copy / "starter.py"
    expected = starter(served, "list", script=script)
    assert expected.returncode == 0
    first = serving_pid(runtime_folder)
    assert starter(served, "list", script=script).stdout == expected.stdout
    wait_for_line(runtime_folder, "list (pid ")

    os.utime(copy / "cli" / "costs.py")  # as a `git pull` or an upgrade would
    handed_back = starter(served, "list", script=script)
    assert (handed_back.returncode, handed_back.stdout) == (0, expected.stdout)
    assert _ends_within(first, 30), "the stale server stayed"
    starter(served, "list", script=script)  # starts the successor, unless the command handed back did
    deadline = time.monotonic() + WAIT
    while (successor := _pid_or_none(runtime_folder)) in (None, first) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert successor not in (None, first)
    assert starter(served, "list", script=script).stdout == expected.stdout
    wait_for_line(runtime_folder, "list (pid ")

    (libraries / "upgraded-1.0.dist-info").mkdir()  # as installing or upgrading a library does
    assert starter(served, "list", script=script).stdout == expected.stdout
    assert _ends_within(successor, 30), "the server of the old libraries stayed"


@pytest.mark.parametrize("mode", ["open to others", "another user's"])
def test_nothing_is_sent_to_a_socket_in_a_folder_not_this_users_alone(
        dev_server: DevServer, runtime_folder: Path, mode: str) -> None:
    """Another user made the folder first (a shared /tmp) and listens where the server would: the
    command runs here, and that socket never hears from it (the request carries the environment)."""
    served = command_env(dev_server, runtime_folder)
    path = _address(served)
    path.parent.mkdir(mode=0o700)
    if mode == "open to others":
        path.parent.chmod(0o777)
    else:
        os.chown(path.parent, 65534, 65534)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as planted:
        planted.bind(str(path))
        planted.listen(8)
        planted.settimeout(0.5)
        got = starter(served, "list")
        assert got.returncode == 0
        with pytest.raises(TimeoutError):
            planted.accept()
    assert not path.with_name(path.name + ".log").exists(), "a server was started there"


def test_nothing_is_sent_to_a_server_of_another_user(dev_server: DevServer, runtime_folder: Path) -> None:
    """The folder is this user's, but the process listening on the socket is not (the kernel knows who
    called ``listen``): the command runs here, and that process reads nothing from it."""
    served = command_env(dev_server, runtime_folder)
    path = _address(served)
    path.parent.mkdir(mode=0o700)
    planted = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    planted.bind(str(path))
    heard_read, heard_write = os.pipe()
    listener = os.fork()
    if listener == 0:  # another user's server: it listens, takes one connection and says what it read
        try:
            os.setgid(65534)
            os.setuid(65534)
            planted.listen(8)
            planted.settimeout(WAIT)
            channel, _ = planted.accept()
            channel.settimeout(WAIT)
            os.write(heard_write, b"read:" + channel.recv(1 << 20)[:64])
        finally:
            os._exit(0)
    planted.close()
    os.close(heard_write)
    try:
        got = starter(served, "list")
        assert got.returncode == 0
        assert os.read(heard_read, 1 << 10) == b"read:"
    finally:
        os.close(heard_read)
        os.waitpid(listener, 0)


# What a module must not read as it is imported: the server's values, not the caller's, in a child.
PROCESS_STATE = {"os.environ", "os.environb", "os.getenv", "os.getcwd", "os.getcwdb", "Path.cwd", "Path.home",
                 "sys.argv"}


class _ImportTimeReads(ast.NodeVisitor):
    """The process state read by a module's body (and its classes' bodies, decorators and defaults),
    outside function bodies and ``if __name__ == ...`` blocks, which run only when called or as a script."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for part in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if part is not None:
                self.visit(part)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        pass

    def visit_If(self, node: ast.If) -> None:
        if "__name__" not in ast.unparse(node.test):
            self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if ast.unparse(node) in PROCESS_STATE:
            self.found.append(f"{node.lineno}: {ast.unparse(node)}")
        self.generic_visit(node)


def test_no_module_reads_the_environment_or_the_working_directory_as_it_is_imported() -> None:
    """The server imports once, with its own environment and directory; each child runs with its
    caller's. A module that read them at import would give every child the server's (ARCHITECTURE.md)."""
    files = [REPO_DIR / name for name in MODULES]
    files += [path for package in PACKAGES for path in sorted((REPO_DIR / package).rglob("*.py"))]
    found = {}
    for path in files:
        reads = _ImportTimeReads()
        reads.visit(ast.parse(path.read_text()))
        if reads.found:
            found[str(path.relative_to(REPO_DIR))] = reads.found
    assert len(files) > 300
    assert found == {}


def _address(env: dict[str, str]) -> Path:
    probe = subprocess.run([sys.executable, "-c", "from cli.command_client import address; print(address())"],
                           env=env, cwd=REPO_DIR, capture_output=True, text=True, check=True)
    path = Path(probe.stdout.strip())
    assert len(os.fsencode(path)) <= MAX_ADDRESS_BYTES and str(ROOT) == str(REPO_DIR)
    return path


def with_sigint(disposition: str, argv: list[str]) -> list[str]:
    """``argv`` executed by a process that first set SIGINT to ``disposition`` (``SIG_IGN`` or ``SIG_DFL``),
    which a program inherits across ``exec`` (a handler does not: Python installs its own on ``SIG_DFL``)."""
    set_then_exec = (f"import os, signal, sys; signal.signal(signal.SIGINT, signal.{disposition}); "
                     "os.execv(sys.argv[1], sys.argv[1:])")
    return [sys.executable, "-c", set_then_exec, *argv]


def _pid_or_none(runtime_folder: Path) -> int | None:
    log = server_log(runtime_folder)
    text = log.read_text() if log.exists() else ""
    lines = [line for line in text.splitlines() if line.startswith("serving ")]
    return int(lines[-1].rsplit("(pid ", 1)[1].rstrip(")")) if lines else None


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` is gone or a zombie within ``seconds`` (its new parent may never reap it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process_state(pid) in ("gone", "Z", "X"):
            return True
        time.sleep(0.1)
    return False


def test_the_image_runs_each_command_on_its_own() -> None:
    """In a container a command is a one-off (`compose run --rm cli`, `kubectl exec`): a server would
    sit in the pod's memory limit for half an hour after it."""
    runtime_stage = (REPO_DIR / "Dockerfile").read_text().split(" AS runtime", 1)[1]
    assert f"{SWITCH}=off" in runtime_stage.split("\nCOPY", 1)[0]
