"""The front door as a new user meets it (issue #13, items 1, 2, 3, 4, 6 and 8).

Unit tests first (no server). Then the embedded default for real: ``starter.py`` with a private
``DEERFLOW_HOME`` and a free loopback port starts its own dev server and background worker, as on
a fresh machine. On it: a SIGKILLed worker is replaced by the next command, a cancelled run says
so, every command's bad input is one line and exit code 2, and a closed pipe is a quiet exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import io
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

import pytest
from rich.console import Console
from temporalio.client import WorkflowExecutionStatus, WorkflowHistory

import cli.watch
import starter
from cli import bulk, listing, operate, research, runs
from cli.render import status_text
from cli.terminal import printable
from cli.watch import Described, Watcher, render_status
from config.settings import Settings
from runtime import build_info, embedded
from runtime.front_door import CliError
from runtime.history_export import read_history_file
from runtime.replay import failure_text
from runtime.run_listing import ListedRun, Page
from tests.support.processes import REPO_DIR, free_port, kill_group, run_starter
from tests.support.runs import OFFLINE_REPORT
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.plan import Plan, Step
from workflows.contracts.research import ResearchRequest
from workflows.contracts.status import Phase, PlanVersion, RunStatus
from workflows.contracts.usage import Usage
from workflows.research.status_view import OFFLINE_NOTICE
from workflows.research.visibility import AWAITING, PHASE

# The bound: from the kill, each command is served by a replacement worker within 10 s (the
# CLI's imports, the worker's start-up until it polls, and the query; the run then goes on to its
# report without a bound). What must never come back is the old wait for the server to forget the
# dead poller (minutes), nor the 10 s the server held a task for the dead worker's sticky queue
# (tests/test_worker_startup.py pins that part down on its own).
RECOVERY_SECONDS = 10.0


def recovery_bound() -> float:
    """The issue's 10 s on an idle machine, stretched by how oversubscribed its cores are: every step
    of a recovery is CPU-bound start-up (about 3 s of CPU), and on the shared test machine other test
    runs can leave this one an eighth of a core. The measured times are printed either way."""
    return RECOVERY_SECONDS * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
QUESTION = "What is rain?"
PROVIDER_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TAVILY_API_KEY", "TAVILY_BASE_URL",
                      "DEERFLOW_OFFLINE_DEMO", "BASIC_MODEL")


# ---------------------------------------------------------------- unit tests (no server)


@pytest.mark.parametrize(("text", "expected"), [
    ("300", timedelta(seconds=300)), ("1.5", timedelta(seconds=1.5)), ("PT12H", timedelta(hours=12)),
    ("P3D", timedelta(days=3)), (" 60 ", timedelta(seconds=60)),
])
def test_review_timeout_takes_seconds_and_iso_8601(text: str, expected: timedelta) -> None:
    args = starter.build_parser().parse_args(["run", "q", "--review-timeout", text])
    assert args.review_timeout == expected


@pytest.mark.parametrize(("flags", "web", "background"), [
    ([], True, True), (["--no-web"], False, True), (["--no-background"], True, False),
])
def test_web_and_background_flags_reach_the_request(flags: list[str], web: bool, background: bool) -> None:
    request = research._request(starter.build_parser().parse_args(["run", "q", *flags]), "q", Settings())
    assert (request.enable_web_search, request.enable_background_investigation) == (web, background)


@pytest.mark.parametrize("text", ["soon", "0", "-5", "P", "1e999"])
def test_a_bad_review_timeout_is_one_line_and_exit_2(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        starter.build_parser().parse_args(["run", "q", "--review-timeout", text])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("Error: argument --review-timeout: "), err


@pytest.mark.parametrize(("question", "slug"), [
    ("Wie funktionieren Wärmepumpen?", "research-wie-funktionieren-warmepumpen-"),
    ("固态电池的前景如何？", "research-固态电池的前景如何-"),
    ("Café $(rm -rf ~); `x`", "research-cafe-rm-rf-x-"),
])
def test_run_ids_are_readable_in_any_script_and_shell_safe(question: str, slug: str) -> None:
    run_id = research._run_id(question)
    assert run_id.startswith(slug) and len(run_id) == len(slug) + 6, run_id


def test_a_question_with_no_letters_gets_no_doubled_prefix() -> None:
    run_id = research._run_id("?!…")
    assert run_id.startswith("research-") and "research-research" not in run_id and len(run_id) == 17


@pytest.mark.parametrize("question", ["", "   ", "\n\t "])
def test_blank_questions_are_refused(question: str) -> None:
    with pytest.raises(ValueError, match="question"):
        ResearchRequest(question=question)


@pytest.mark.parametrize(("tag", "warned"), [
    ("en-US", False), ("zh-CN", False), ("zh-Hant-TW", False), ("es-419", False), ("de", False),
    ("klingon", True), ("en_US", True), ("english", True), ("", True),
])
def test_locales_that_are_not_bcp_47_are_warned_about(tag: str, warned: bool) -> None:
    assert (research.BCP47.fullmatch(tag) is None) is warned


def test_the_question_comes_from_the_argument_stdin_or_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long_question = "Why? " * 40_000  # 200 KB: more than one command-line argument may hold
    (tmp_path / "q.txt").write_text(long_question, encoding="utf-8")
    assert research._question(argparse.Namespace(question=None, question_file=str(tmp_path / "q.txt"))) == long_question
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(read=lambda: long_question, isatty=lambda: False))
    assert research._question(argparse.Namespace(question="-", question_file=None)) == long_question
    with pytest.raises(CliError, match="as an argument, as - to read it from stdin, or with --question-file"):
        research._question(argparse.Namespace(question="q", question_file=str(tmp_path / "q.txt")))
    with pytest.raises(CliError, match="Cannot read the question file"):
        research._question(argparse.Namespace(question=None, question_file=str(tmp_path / "missing.txt")))


def test_output_paths_are_checked_before_any_work(tmp_path: Path) -> None:
    runs._check_output(str(tmp_path / "report.md"))
    with pytest.raises(CliError, match=r"the folder .* does not exist"):
        runs._check_output(str(tmp_path / "nonexistent" / "r.md"))
    with pytest.raises(CliError, match="it is a directory"):
        runs._check_output(str(tmp_path))


def test_an_ended_run_says_how_it_ended_above_its_last_phase() -> None:
    plan = Plan(title="Rain", steps=[Step(title="Clouds")])
    status = RunStatus(phase=Phase.AWAITING_REVIEW, awaiting="plan_feedback", plan=plan,
                       plan_history=[PlanVersion(version=1, plan=plan), PlanVersion(version=2, plan=plan)])
    text = status_text("r1", status, ended="cancelled")
    assert text.splitlines()[:2] == ["Run r1: cancelled", "  Last phase: awaiting_review"]
    assert "Awaiting" not in text  # nothing waits on an ended run
    assert "Plan: Rain (version 2)" in text and "iteration" not in text
    running = status_text("r1", status).splitlines()
    assert running[0] == "Run r1: awaiting_review" and running[1].startswith("  Awaiting: plan_feedback")


def test_the_live_panel_of_an_ended_run_says_how_it_ended_and_where_it_stood() -> None:
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(render_status(RunStatus(phase=Phase.AWAITING_REVIEW), "r1", datetime.now(UTC),
                                ended=("cancelled", "awaiting_review")))
    text = console.export_text()
    assert "Ended    cancelled" in text and "Phase    awaiting review" in text, text


def test_replay_failures_are_one_readable_sentence() -> None:
    core = ('Workflow activation completion failed: Failure { failure: Some(Failure { message: "[TMPRL1100] '
            'Nondeterminism error: Activity type of scheduled event \'web_search\' does not match", source: "" }) }')
    assert failure_text(RuntimeError(core)) == (
        "[TMPRL1100] Nondeterminism error: Activity type of scheduled event 'web_search' does not match")
    assert printable(failure_text(RuntimeError("\x1b[33mplain\x1b[0m text"))) == "plain text"


def test_a_history_file_replays_under_its_run_name_not_the_file_name(tmp_path: Path) -> None:
    path = REPO_DIR / "tests" / "histories" / "accepted_plan.json"
    # This server version leaves workflow_id out of the started event: the file is named as such.
    assert read_history_file(str(path)).workflow_id == f"the run in {path}"
    recorded = WorkflowHistory.from_json("", path.read_text())
    recorded.events[0].workflow_execution_started_event_attributes.workflow_id = "research-rain-1a2b3c"
    named = tmp_path / "named.json"
    named.write_text(recorded.to_json())
    assert read_history_file(str(named)).workflow_id == "research-rain-1a2b3c"


@pytest.mark.parametrize(("module", "handler", "argv", "said"), [
    (operate, "watch_run", ["watch", "research-rain-1a2b3c"],
     "The run goes on in Temporal; `python starter.py status research-rain-1a2b3c` shows it."),
    (bulk, "review", ["review", "research-rain-1a2b3c", "--accept"],
     "The run may have had the decision already; `python starter.py status research-rain-1a2b3c` shows it."),
    (listing, "list_runs", ["list"], ""),  # about no run: it names none
])
def test_ctrl_c_says_what_became_of_the_run_the_command_was_about(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], module: object, handler: str,
        argv: list[str], said: str) -> None:
    async def interrupted(_args: argparse.Namespace, _settings: Settings) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(module, handler, interrupted)
    assert starter.main(argv) == 130
    assert capsys.readouterr().err == f"\nInterrupted.{' ' if said else ''}{said}\n"


async def test_leaving_a_review_for_later_says_how_to_write_the_report_to_o(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    class Watcher:
        closed = None
        live = False  # no panel: the plan is printed as text

        def __init__(self, **_kwargs: Any) -> None:
            pass

        async def follow(self, _handle: Any, until: Any) -> RunStatus:
            return RunStatus(phase=Phase.AWAITING_REVIEW, awaiting="plan_feedback",
                             plan=Plan(title="Rain", steps=[Step(title="Clouds")]))

    async def later(_handle: Any, _by: Actor) -> bool:
        return False

    monkeypatch.setattr(cli.watch, "Watcher", Watcher)  # imported by research._follow when it follows
    monkeypatch.setattr(research, "_interactive_review", later)
    handle = SimpleNamespace(id="research-rain", _client=None)
    assert await research._follow(handle, Settings(), Actor(name="tester", via="cli"), interactive=True,  # type: ignore[arg-type]
                                  output="out/r.md") is None
    assert "Then, once the run is done: python starter.py report research-rain -o out/r.md" in capsys.readouterr().out


async def test_list_survives_a_row_that_cannot_be_queried(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Where the namespace keeps no phases, a running run's phase is asked of it; one that cannot answer
    says why in its row and the list goes on."""
    now = datetime.now(UTC)
    rows = [
        SimpleNamespace(id="research-ok", status=WorkflowExecutionStatus.RUNNING, start_time=now,
                        typed_search_attributes={}),
        SimpleNamespace(id="research-a-much-longer-id-than-the-others", status=WorkflowExecutionStatus.RUNNING,
                        start_time=now, typed_search_attributes={}),
        SimpleNamespace(id="research-gone", status=WorkflowExecutionStatus.CANCELED, start_time=now,
                        typed_search_attributes={}),
    ]

    class Client:
        def get_workflow_handle(self, workflow_id: str) -> Any:
            return SimpleNamespace(id=workflow_id)

    async def connect(_settings: Settings, **_kwargs: Any) -> Client:
        return Client()

    async def page(*_args: Any, **_kwargs: Any) -> Page:
        return Page([ListedRun(row, None, Actor(name="ann", via=Via.CLI) if row.id == "research-gone" else None)
                     for row in rows], None)  # type: ignore[arg-type]

    async def status(handle: Any) -> RunStatus:
        if handle.id == "research-ok":
            return RunStatus(phase=Phase.RESEARCHING)
        raise CliError("Could not read the status of it: no worker answers this run's queries")

    async def unindexed(_client: Any, _filter: Any) -> list[Any]:
        return [PHASE, AWAITING]

    async def usages(_client: Any, executions: list[Any]) -> list[Usage | None]:
        # The spend is read apart from the phase (cli/costs.py); a run whose spend cannot be read shows "-".
        return [Usage(llm_calls=2, total_tokens=1234) if row.id == "research-ok" else None for row in executions]

    monkeypatch.setattr(listing, "connect", connect)
    monkeypatch.setattr(listing, "list_page", page)
    monkeypatch.setattr(listing, "_status", status)
    monkeypatch.setattr(listing, "missing_for", unindexed)
    monkeypatch.setattr(listing, "indexes_questions", lambda _client: True)
    monkeypatch.setattr(listing, "usages", usages)
    args = argparse.Namespace(running=False, awaiting_review=False, limit=50, page=None)
    assert await listing.list_runs(args, Settings()) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[1].split()[:3] == ["research-ok", "running", "researching"]
    assert "1,234 tokens · no cost recorded" in lines[1] and lines[3].split()[3] == "-"
    assert "? Could not read the status of it: no worker answers" in lines[2]
    assert lines[3].split()[:2] == ["research-gone", "cancelled"] and lines[3].endswith("ann (cli)")
    # Columns fit their content: every STATUS cell starts where the longest ID ends, plus two spaces.
    column = len("research-a-much-longer-id-than-the-others") + 2
    assert {line[column:column + 9].strip() for line in lines} == {"STATUS", "running", "cancelled"}


def test_the_code_digest_follows_the_product_code_not_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("workflows/__init__.py", "workflows/a.py", "prompts/p.md", "offline/corpus.json", "tests/t.py",
                 "worker.py", "README.md", "bench/b.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x")
    monkeypatch.setattr(build_info, "ROOT", tmp_path)
    digests = [build_info.code_digest()]
    for name, counts in (("workflows/a.py", True), ("prompts/p.md", True), ("offline/corpus.json", True),
                         ("worker.py", True), ("tests/t.py", False), ("README.md", False), ("bench/b.py", False)):
        (tmp_path / name).write_text("changed")
        digests.append(build_info.code_digest())
        assert (digests[-1] != digests[-2]) is counts, name
    # Contents, not times: the same code gives the same digest in every checkout and image.
    os.utime(tmp_path / "workflows" / "a.py", (0, 0))
    assert build_info.code_digest() == digests[-1]


@dataclass
class RecordedWorker:
    """An embedded stack whose worker record names a live process (a sleeper), and whose worker starts
    are recorded, not made."""

    stack: embedded.EmbeddedStack
    process: subprocess.Popen[bytes]
    started: list[str]

    def record(self, **fields: str) -> None:
        record = {"pid": self.process.pid, "started": embedded._start_time(self.process.pid), "address": "a:1"}
        (self.stack.state_dir() / "worker.pid").write_text(json.dumps({**record, **fields}))


@pytest.fixture
def recorded_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordedWorker]:
    worker = RecordedWorker(embedded.EmbeddedStack(Settings(DEERFLOW_HOME=tmp_path / "home")),
                            subprocess.Popen(["sleep", "30"], start_new_session=True), [])

    async def start_worker(client: object, address: str) -> None:
        worker.started.append(address)

    monkeypatch.setattr(worker.stack, "start_worker", start_worker)
    try:
        yield worker
    finally:
        if worker.process.poll() is None:
            worker.process.kill()


async def test_a_worker_started_before_the_code_changed_is_replaced(recorded_worker: RecordedWorker) -> None:
    """After `git pull`, the old background worker would reject requests with new fields."""
    stack, old, started = recorded_worker.stack, recorded_worker.process, recorded_worker.started
    recorded_worker.record(code=build_info.code_digest())
    assert await stack.ensure_worker(object(), "a:1") is False  # type: ignore[arg-type]  # same code: kept
    assert old.poll() is None and started == []
    recorded_worker.record(code="before the pull")
    assert await stack.ensure_worker(object(), "a:1") is True  # type: ignore[arg-type]
    assert old.wait(timeout=10) == -signal.SIGTERM and started == ["a:1"]


async def test_the_worker_check_reads_the_stamp_first_and_the_digest_when_the_files_were_touched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recorded_worker: RecordedWorker) -> None:
    """The record's stamp (paths, sizes, times) spares each command hashing the code; a stale stamp
    falls back on the digest, so touched but unchanged files keep the worker, and changed ones replace it."""
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "a.py").write_text("x")
    monkeypatch.setattr(build_info, "ROOT", tmp_path)
    hashed: list[str] = []
    monkeypatch.setattr(embedded, "code_digest", lambda: hashed.append("digest") or build_info.code_digest())
    stack, old, started = recorded_worker.stack, recorded_worker.process, recorded_worker.started
    recorded_worker.record(code=build_info.code_digest(), stamp=build_info.code_stamp())
    assert await stack.ensure_worker(object(), "a:1") is False  # type: ignore[arg-type]
    assert hashed == []  # the stamp alone said the files are those the worker started with
    os.utime(tmp_path / "workflows" / "a.py", (1, 1))  # touched, same contents: the digest says so
    assert await stack.ensure_worker(object(), "a:1") is False  # type: ignore[arg-type]
    assert hashed == ["digest"] and started == []
    (tmp_path / "workflows" / "a.py").write_text("y")  # changed: the digest differs, the worker goes
    assert await stack.ensure_worker(object(), "a:1") is True  # type: ignore[arg-type]
    assert old.wait(timeout=10) == -signal.SIGTERM and started == ["a:1"]


def test_the_code_stamp_follows_each_files_size_and_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "workflows").mkdir()
    source = tmp_path / "workflows" / "a.py"
    source.write_text("x")
    monkeypatch.setattr(build_info, "ROOT", tmp_path)
    first = build_info.code_stamp()
    assert build_info.code_stamp() == first
    os.utime(source, (5, 5))
    touched = build_info.code_stamp()
    source.write_text("xy")
    os.utime(source, (5, 5))
    assert len({first, touched, build_info.code_stamp()}) == 3


def test_only_the_recorded_process_counts_never_a_reused_pid(tmp_path: Path) -> None:
    stack = embedded.EmbeddedStack(Settings(DEERFLOW_HOME=tmp_path))
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    started = embedded._start_time(sleeper.pid)
    assert started
    (tmp_path / "worker.pid").write_text(json.dumps({"pid": sleeper.pid, "started": started, "address": "a:1"}))
    assert stack.recorded_process("worker", "a:1") == sleeper.pid
    assert stack.recorded_process("worker", "b:2") is None  # a record for another server says nothing
    # The same pid with another start time is some other process that reused the number: not ours,
    # so neither reported alive nor signalled by `down`.
    (tmp_path / "worker.pid").write_text(json.dumps({"pid": sleeper.pid, "started": "1", "address": "a:1"}))
    assert stack.recorded_process("worker") is None
    assert stack.stop() == []
    assert sleeper.poll() is None
    sleeper.kill()
    sleeper.wait()
    (tmp_path / "worker.pid").write_text(json.dumps({"pid": sleeper.pid, "started": started, "address": "a:1"}))
    assert stack.recorded_process("worker") is None  # dead
    # A bare pid (older versions) is stopped only if that pid runs our command.
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    (tmp_path / "worker.pid").write_text(str(other.pid))
    assert stack.stop() == []  # sleep is not worker.py
    assert other.poll() is None
    other.kill()
    other.wait()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "worker.py"],
                              start_new_session=True)
    (tmp_path / "worker.pid").write_text(str(worker.pid))
    while b"worker.py" not in Path(f"/proc/{worker.pid}/cmdline").read_bytes():
        time.sleep(0.01)  # until the fork has become the new program
    assert stack.stop() == ["worker"]
    assert worker.wait(timeout=10) == -signal.SIGTERM


# ---------------------------------------------------------------- the embedded default, for real


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A fresh machine's environment: no keys, a private home, free loopback ports."""
    env = {key: value for key, value in os.environ.items() if key not in PROVIDER_VARIABLES}
    env.update(DEERFLOW_HOME=str(tmp_path_factory.mktemp("home")), DEERFLOW_UI_PORT=str(free_port()),
               DEERFLOW_EMBEDDED_ADDRESS=f"127.0.0.1:{free_port()}")
    try:
        yield env
    finally:
        subprocess.run([sys.executable, str(REPO_DIR / "starter.py"), "down"], env=env, cwd=REPO_DIR,
                       capture_output=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def completed_run(home: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The first command on a fresh machine starts the server and a worker and runs a job to the end."""
    report = tmp_path_factory.mktemp("out") / "report.md"
    ran = run_starter(home, "run", QUESTION, "--auto-accept", "--id", "research-done", "-o", str(report))
    assert ran.returncode == 0, ran.stderr
    assert report.read_text().startswith(OFFLINE_REPORT)
    assert "Display delay" not in ran.stderr  # only with --verbose
    return "research-done"


def worker_pid(home: dict[str, str]) -> int:
    return int(json.loads((Path(home["DEERFLOW_HOME"]) / "worker.pid").read_text())["pid"])


def kill_worker(home: dict[str, str]) -> int:
    pid = worker_pid(home)
    kill_group(pid)
    return pid


def seconds_until_line(stream: IO[str], needle: str, since: float) -> tuple[float, list[str]]:
    """When (seconds after ``since``) ``stream`` showed ``needle``, and the lines up to it. The wait
    is generous, so a slow machine fails on the bound, with the measured times, rather than here."""
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break  # the command ended
        lines.append(line)
        if needle in line:
            return time.monotonic() - since, lines
    raise AssertionError(f"{needle!r} not seen: {lines}")


async def test_a_killed_worker_is_replaced_and_status_watch_and_run_recover(
        home: dict[str, str], completed_run: str, tmp_path: Path) -> None:
    started = await asyncio.to_thread(run_starter, home, "run", QUESTION, "--no-wait", "--id", "research-paused")
    assert started.returncode == 0, started.stderr
    paused = await asyncio.to_thread(run_starter, home, "status", "research-paused")
    deadline = time.monotonic() + 60
    while "Awaiting: plan_feedback" not in paused.stdout:
        assert time.monotonic() < deadline, paused.stdout + paused.stderr
        paused = await asyncio.to_thread(run_starter, home, "status", "research-paused")

    dead = kill_worker(home)
    # status, watch and a new run, side by side, right after the crash: one replacement serves them all.
    began = time.monotonic()

    def timed_status() -> tuple[subprocess.CompletedProcess[str], float]:
        return run_starter(home, "status", "research-paused"), time.monotonic() - began

    def starter_process(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(REPO_DIR / "starter.py"), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=home, cwd=REPO_DIR)

    report = tmp_path / "second.md"
    watcher = starter_process("watch", "research-paused", "--plain")
    runner = starter_process("run", QUESTION, "--auto-accept", "-o", str(report))
    assert watcher.stdout is not None and runner.stdout is not None
    try:
        # The run has recovered when a worker answers it: its first phase comes from the workflow.
        (status, status_seconds), (watch_seconds, _), (run_seconds, run_lines) = await asyncio.gather(
            asyncio.to_thread(timed_status),
            asyncio.to_thread(seconds_until_line, watcher.stdout, "Awaiting plan review", began),
            asyncio.to_thread(seconds_until_line, runner.stdout, "phase → ", began))
        run_output = "".join(run_lines) + (await asyncio.to_thread(runner.communicate, timeout=120))[0]
        assert status.returncode == 0 and "Awaiting: plan_feedback" in status.stdout, status.stderr
        assert runner.returncode == 0 and report.read_text().startswith(OFFLINE_REPORT), run_output
        recovered = {"status": round(status_seconds, 1), "watch": round(watch_seconds, 1),
                     "run": round(run_seconds, 1)}
        bound = recovery_bound()
        print(f"Recovered after the kill (s): {recovered}; bound {bound:.0f} s (load {os.getloadavg()[0]:.1f})")
        assert max(recovered.values()) < bound, recovered
        assert worker_pid(home) != dead and embedded._start_time(worker_pid(home))
        starts = (status.stderr + run_output).count("Starting a background worker")
        assert starts <= 1, status.stderr + run_output

        # Cancelled: the watch, status and list say so above the last phase; a second cancel says it ended.
        cancelled = await asyncio.to_thread(run_starter, home, "cancel", "research-paused")
        assert cancelled.returncode == 0, cancelled.stderr
        out, _ = await asyncio.to_thread(watcher.communicate, timeout=60)
        assert "run cancelled: last phase awaiting_review" in out, out
        assert watcher.returncode == 1
    finally:
        for process in (watcher, runner):
            if process.poll() is None:
                process.kill()
    shown = await asyncio.to_thread(run_starter, home, "status", "research-paused")
    assert shown.stdout.splitlines()[:2] == ["Run research-paused: cancelled", "  Last phase: awaiting_review"]
    assert json.loads((await asyncio.to_thread(run_starter, home, "status", "research-paused", "--json")).stdout)[
        "ended"] == "cancelled"
    again = await asyncio.to_thread(run_starter, home, "cancel", "research-paused")
    assert again.returncode == 2 and "has already ended (cancelled)" in again.stderr, again.stderr
    no_report = await asyncio.to_thread(run_starter, home, "report", "research-paused")
    assert no_report.returncode == 4 and "was cancelled and has no report" in no_report.stderr, no_report.stderr
    listed = await asyncio.to_thread(run_starter, home, "list")
    assert any(line.split()[:2] == ["research-paused", "cancelled"] for line in listed.stdout.splitlines())

    # An ID that is taken is refused, with how to read the old run; --force starts anew.
    reused = await asyncio.to_thread(run_starter, home, "run", QUESTION, "--no-wait", "--id", completed_run)
    assert reused.returncode == 2 and f"python starter.py report {completed_run}" in reused.stderr, reused.stderr
    assert "--force" in reused.stderr and len(reused.stderr.strip().splitlines()) == 1
    forced = await asyncio.to_thread(run_starter, home, "run", QUESTION, "--no-wait", "--id", "research-paused",
                                     "--force")
    assert forced.returncode == 0, forced.stderr


def run_on_a_terminal(env: dict[str, str], *args: str, answer: bytes, timeout: float = 120) -> tuple[int, bytes]:
    """``starter.py *args`` with a pseudo-terminal (100x40) as stdin, stdout and stderr, as a person runs
    it; ``answer`` is typed at the plan review prompt. Returns the exit code and all it wrote."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    process = subprocess.Popen([sys.executable, str(REPO_DIR / "starter.py"), *args], stdin=terminal, stdout=terminal,
                               stderr=terminal, env=env, cwd=REPO_DIR, start_new_session=True)
    os.close(terminal)
    written, answered, deadline = b"", False, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([controller], [], [], 0.5)[0]:
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the command ended and closed the terminal
                break
            if not chunk:
                break
            written += chunk
            if not answered and b"Accept this plan?" in written:
                os.write(controller, answer)
                answered = True
        return process.wait(timeout=30), written
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()


def test_on_a_terminal_the_plan_is_shown_once_in_the_live_panel(home: dict[str, str], completed_run: str) -> None:
    """Issue #13, item 8: the plan was printed again below the live panel that already showed it.

    The panel at review carries the whole plan (thought, locale, step descriptions), and nothing
    repeats it between the panel and the prompt.
    """
    code, written = run_on_a_terminal(home, "run", QUESTION, "--id", "research-on-a-terminal", answer=b"a\n")
    screen = written.decode(errors="replace")
    assert code == 0, screen
    before_prompt = screen[:screen.index("Accept this plan?")]
    panel_end = before_prompt.rindex("╰")  # the bottom edge of the last panel drawn before the prompt
    plan = json.loads(run_starter(home, "status", "research-on-a-terminal", "--json").stdout)["plan"]
    first_words = " ".join(plan["steps"][0]["description"].split()[:3])
    for shown in (f"(locale {plan['locale']})", "Thought:", first_words):
        assert shown in before_prompt[:panel_end], f"{shown!r} not in the panel: {before_prompt}"
    after_panel = before_prompt[panel_end:]
    assert plan["title"] not in after_panel and plan["steps"][0]["title"] not in after_panel, after_panel
    assert "Plan accepted" in screen and OFFLINE_NOTICE in screen  # the report, after the research


def one_error_line(code: int, err: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "Traceback" not in err


BAD_INPUTS = [
    (["run", ""], "question: String should have at least 1 character"),
    (["run", "   "], "question: Value error, the question is blank"),
    (["run"], "as - to read it from stdin"),
    (["run", "--question-file", "/nonexistent/q.txt"], "Cannot read the question file"),
    (["run", "q", "--question-file", "/nonexistent/q.txt"], "as - to read it from stdin"),
    (["run", "q", "--review-timeout", "soon"], "is not a duration"),
    (["run", "q", "-o", "/nonexistent/dir/r.md"], "the folder /nonexistent/dir does not exist"),
    (["run", "q", "--max-steps", "0"], "must be at least 1"),
    (["review", "no-such-run", "--accept"], "No research run with ID 'no-such-run'"),
    (["review", "x"], "one of the arguments --accept --edit is required"),
    (["answer", "no-such-run", "the EU"], "No research run with ID 'no-such-run'"),
    (["watch", "no-such-run", "--plain"], "No research run with ID 'no-such-run'"),
    (["status", "no-such-run"], "No research run with ID 'no-such-run'"),
    (["report", "no-such-run"], "No research run with ID 'no-such-run'"),
    (["report", "research-done", "-o", "/nonexistent/dir/r.md"], "does not exist"),
    (["list", "--limit", "0"], "must be at least 1"),
    (["cancel", "no-such-run"], "No research run with ID 'no-such-run'"),
    (["history", "no-such-run"], "No research run with ID 'no-such-run'"),
    (["history", "research-done", "-o", "/nonexistent/dir/h.json"], "does not exist"),
    (["replay"], "replay needs a run ID, --file FILE.json, or --since"),
    (["replay", "--file", "/nonexistent.json"], "Cannot read history file"),
    (["nonsense"], "invalid choice"),
    (["blobs", "gc", "--older-than", "0.01"], "under the one-hour safety margin"),
    (["blobs", "gc", "--older-than", "soon"], "is not a number of days"),
    (["blobs"], "the following arguments are required: gc"),
    (["codec-server", "--host", "0.0.0.0"], "Listening on 0.0.0.0 needs DEERFLOW_CODEC_TOKEN"),
    (["codec-server", "--port", "0"], "must be at least 1"),
    (["serve", "--host", "0.0.0.0"], "Listening on 0.0.0.0 needs DEERFLOW_WEB_TOKEN"),
]


def test_every_command_with_bad_input_prints_one_clear_line_and_exits_2(
        home: dict[str, str], completed_run: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """In-process (one import, many commands): any exception escaping ``main`` fails the test."""
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in ("DEERFLOW_HOME", "DEERFLOW_UI_PORT", "DEERFLOW_EMBEDDED_ADDRESS"):
        monkeypatch.setenv(name, home[name])
    for argv, message in BAD_INPUTS:
        try:
            code = starter.main(argv)
        except SystemExit as exited:  # argparse
            code = int(exited.code or 0)
        err = capsys.readouterr().err
        one_error_line(code, err)
        assert message in err, (argv, err)


def test_a_closed_pipe_is_a_quiet_exit_0(home: dict[str, str], completed_run: str) -> None:
    """``starter.py … | head -c1``: the reader leaves at once; no traceback, exit code 0."""
    commands_to_cut = [["report", completed_run], ["status", completed_run, "--json"],
                       ["watch", completed_run, "--plain"], ["list"], ["history", completed_run],
                       ["replay", completed_run], ["--help"], ["run", "--help"], ["blobs", "gc", "--dry-run"],
                       ["codec-server", "--help"], ["serve", "--help"]]
    processes = []
    for args in commands_to_cut:
        read, write = os.pipe()
        os.close(read)  # nobody will read: the first write that reaches the pipe fails with EPIPE
        processes.append((args, subprocess.Popen([sys.executable, str(REPO_DIR / "starter.py"), *args], stdout=write,
                                                 stderr=subprocess.PIPE, text=True, env=home, cwd=REPO_DIR)))
        os.close(write)
    for args, process in processes:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0 and "Traceback" not in err and "Error" not in err, (args, err)


async def test_a_watch_revives_the_worker_when_none_answers_mid_run() -> None:
    """The worker dies during a long watch: the watch asks the front door for a new one, then goes on."""
    revived: list[bool] = []
    answers = iter([TimeoutError("no poller"), RunStatus(phase=Phase.COMPLETED)])

    async def describe(_handle: Any) -> Described:
        return Described(WorkflowExecutionStatus.COMPLETED if revived else WorkflowExecutionStatus.RUNNING)

    async def query(_handle: Any) -> RunStatus:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def revive() -> None:
        revived.append(True)

    out = io.StringIO()
    final = await Watcher(live=False, out=out, poll_seconds=0.01, describe=describe, query=query,
                          on_no_worker=revive).follow(SimpleNamespace(id="r1"))  # type: ignore[arg-type]
    assert revived == [True] and final.phase is Phase.COMPLETED
    assert "Start one with `python worker.py`" in out.getvalue()
