"""Model-written terminal escapes never reach the terminal (security issue #8, item 10).

A report, plan, finding, question or event holding ESC[2J (clear screen), OSC 0 (window title),
OSC 52 (clipboard write), OSC 8 (hyperlink), BEL, 8-bit CSI, a bidi override or rich markup is
printed without them by every command that shows it; a file written with ``-o`` keeps the text.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.client import WorkflowExecutionStatus

from cli import runs as commands_module
from cli.render import plan_text, status_text
from cli.runs import _write_report
from cli.terminal import printable, printable_json
from cli.watch import Watcher, render_status
from config.settings import Settings
from runtime.forks import ForkListed
from tests.support.processes import REPO_DIR
from tests.support.status_samples import T0, ScriptedRun, handle, sample_status
from workflows.contracts.fork_point import ForkPoint, ForkStage
from workflows.contracts.plan import Plan, Step
from workflows.contracts.research import ResearchResult
from workflows.contracts.status import Awaiting, Phase, ProgressEvent, RunStatus

CLEAR, TITLE, CLIPBOARD = "\x1b[2J", "\x1b]0;pwned\x07", "\x1b]52;c;cm0gLXJmIH4=\x1b\\"
LINK, BELL, CSI8, BIDI, RED = "\x1b]8;;http://evil.example/\x07", "\x07", "\x9b2J", "\u202e", "\x1b[5;7;41m"
MARKUP = "[bold red]alarm[/bold red] [link=http://evil.example/]click[/link]"
HOSTILE = f"Sodium{CLEAR} ion{TITLE} cells{CLIPBOARD} {LINK}here{BELL}{CSI8} {BIDI}txt.exe{RED} \r{MARKUP}"
VISIBLE = "Sodium ion cells here txt.exe " + MARKUP  # what a reader should see
ATTACKS = (CLEAR, "\x1b]0;", "\x1b]52;", "\x1b]8;", BELL, "\x9b", BIDI, RED, "\r")


def assert_harmless(text: str) -> None:
    for attack in ATTACKS:
        assert attack not in text, f"{attack!r} reached the terminal: {text!r}"


def test_printable_strips_sequences_and_controls_and_keeps_text() -> None:
    assert printable(HOSTILE) == VISIBLE
    assert printable("line one\n\tindented 中文 ✓") == "line one\n\tindented 中文 ✓"
    assert printable("\x1b(B\x1bc\x1bP1$r\x1b\\\x00\x7f\x85end") == "end"  # charset, reset, DCS, NUL, DEL, NEL


def test_printable_json_is_the_same_json_without_terminal_controls() -> None:
    text = json.dumps({"title": HOSTILE}, ensure_ascii=False)
    safe = printable_json(text)
    assert json.loads(safe) == {"title": HOSTILE}
    assert "\x1b" not in safe and "\x9b" not in safe and BIDI not in safe


def test_report_on_screen_is_stripped_and_the_file_keeps_the_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    result = ResearchResult(report=f"# Report\n\n{HOSTILE}\n")
    _write_report(result, None, notice=None)
    shown = capsys.readouterr().out
    assert_harmless(shown)
    assert VISIBLE in shown and MARKUP in shown
    _write_report(result, str(tmp_path / "report.md"), notice=None)
    assert (tmp_path / "report.md").read_bytes().decode() == result.report
    assert_harmless(capsys.readouterr().err)


def hostile_status(**changes: object) -> RunStatus:
    plan = Plan(title=HOSTILE, thought=HOSTILE, steps=[Step(title=HOSTILE, description=HOSTILE)])
    status = sample_status(plan=plan, error=HOSTILE, question=HOSTILE,
                           events=[ProgressEvent(at=T0.isoformat(), kind="plan", message=HOSTILE)],
                           forked_from=ForkPoint(workflow_id=HOSTILE, stage=ForkStage.REPORT))
    status.steps[0].title = status.steps[0].finding_preview = HOSTILE
    return status.model_copy(update=changes)


def test_plan_and_status_text_are_stripped() -> None:
    status = hostile_status()
    assert status.plan is not None
    for text in (plan_text(status.plan), status_text("r1", status)):
        assert_harmless(text)
        assert VISIBLE in text


def test_the_live_panel_shows_markup_literally_and_no_model_escapes() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="truecolor", width=400)
    console.print(render_status(hostile_status(), f"r1{TITLE}[blink]", T0, note=f"down{CLEAR}"))
    shown = out.getvalue()
    # rich writes its own SGR colour codes; none of the model's sequences may be among them.
    for attack in (CLEAR, "\x1b]0;", "\x1b]52;", "\x1b]8;", BELL, "\x9b", BIDI, RED):
        assert attack not in shown, attack
    plain = Console(file=io.StringIO(), width=400, record=True)
    plain.print(render_status(hostile_status(), f"r1{TITLE}[blink]", T0))
    text = plain.export_text()
    # markup shown as written, not obeyed, in the titles too
    assert f"Plan v1 · {VISIBLE}" in text and "DeerFlow research · r1[blink]" in text, text


async def test_the_plain_watch_lines_are_stripped() -> None:
    finished = hostile_status(phase=Phase.COMPLETED, awaiting=Awaiting.CLARIFICATION)
    run = ScriptedRun([(WorkflowExecutionStatus.COMPLETED, lambda: finished)])
    out = io.StringIO()
    await Watcher(live=False, out=out, poll_seconds=0.01, describe=run.describe, query=run.query).follow(handle())
    assert_harmless(out.getvalue())
    assert VISIBLE in out.getvalue()


class FakeClient:
    def get_workflow_handle(self, run_id: str, **_: object) -> object:
        return handle()


@pytest.fixture
def commands(monkeypatch: pytest.MonkeyPatch) -> object:
    """``starter.py`` commands against a completed run whose texts are all hostile."""
    async def connect(*_: object, **__: object) -> FakeClient:
        return FakeClient()

    async def status(_handle: object) -> RunStatus:
        return hostile_status()

    async def describe(_handle: object) -> object:
        return argparse.Namespace(status=WorkflowExecutionStatus.COMPLETED)

    async def result(_handle: object) -> ResearchResult:
        return ResearchResult(report=HOSTILE)

    async def revive_worker(_client: object, _settings: object) -> None:
        """No embedded worker to start: the run's status is the fake's."""

    async def forks(_client: object, _run_id: str) -> list[ForkListed]:
        return [ForkListed(workflow_id=HOSTILE, at="step 2", started_by=None, status="completed")]

    fakes = (("connect", connect), ("_status", status), ("_describe", describe), ("_result", result),
             ("revive_worker", revive_worker), ("_forks", forks))
    for name, fake in fakes:
        monkeypatch.setattr(commands_module, name, fake)
    return commands_module


async def test_status_and_report_commands_print_no_escapes(
    commands: object, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    await commands_module.status(argparse.Namespace(id="r1", json=False), Settings())
    await commands_module.report(argparse.Namespace(id="r1", output=None), Settings())
    shown = capsys.readouterr().out
    assert_harmless(shown)
    assert shown.count(VISIBLE) >= 2
    assert f"Forked from {VISIBLE} at report" in shown and f"Fork: {VISIBLE} at step 2 (completed)" in shown
    await commands_module.status(argparse.Namespace(id="r1", json=True), Settings())
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown and BIDI not in shown
    assert json.loads(shown)["plan"]["title"] == HOSTILE  # the same JSON value, escaped
    await commands_module.report(argparse.Namespace(id="r1", output=str(tmp_path / "r.md")), Settings())
    assert (tmp_path / "r.md").read_bytes().decode() == HOSTILE


LONE = "lone \ud800 high, \udcff low, pair \ud83d\ude00"  # a "\ud800" escape, a byte Python escaped, a pair
LONE_SHOWN = "lone \ufffd high, \ufffd low, pair \U0001f600"


async def test_lone_surrogates_in_a_run_are_printed_as_replacement_characters(
    commands: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """status, status --json and report of a run whose texts hold lone surrogates. pytest's capture
    encodes strictly, as standard output on a pipe does: printed as they are, they fail the command."""
    plan = Plan(title=LONE, thought=LONE, steps=[Step(title=LONE, description=LONE)])

    async def status(_handle: object) -> RunStatus:
        return sample_status(plan=plan, error=LONE, question=LONE)

    async def result(_handle: object) -> ResearchResult:
        return ResearchResult(report=LONE)

    monkeypatch.setattr(commands_module, "_status", status)
    monkeypatch.setattr(commands_module, "_result", result)
    await commands_module.status(argparse.Namespace(id="r1", json=False), Settings())
    await commands_module.report(argparse.Namespace(id="r1", output=None), Settings())
    shown = capsys.readouterr().out
    assert shown.count(LONE_SHOWN) >= 3 and LONE_SHOWN in plan_text(plan)
    await commands_module.status(argparse.Namespace(id="r1", json=True), Settings())
    assert json.loads(capsys.readouterr().out)["plan"]["title"] == LONE_SHOWN


@pytest.mark.parametrize("utf8_mode", ["0", "1"])
def test_a_real_command_writes_utf_8_to_a_pipe_whatever_it_prints(utf8_mode: str, tmp_path: Path) -> None:
    """``starter.py config`` printing a conf.yaml value with lone surrogates (YAML's "\\ud800" escape),
    its standard output a pipe: it failed with UnicodeEncodeError (strict, the default), and wrote a
    0xFF byte (surrogateescape: UTF-8 mode). The process's streams replace them (runtime/text_streams.py)."""
    conf = tmp_path / "conf.yaml"
    conf.write_text('BASIC_MODEL:\n  model: "caf\\ud800 \\udcff \\ud83d\\ude00"\n  base_url: "http://127.0.0.1:9/v1"\n')
    env = {"PATH": "/usr/bin:/bin", "DEERFLOW_HOME": str(tmp_path / "home"), "DEERFLOW_CONF": str(conf),
           "PYTHONUTF8": utf8_mode, "LANG": "C.UTF-8"}
    done = subprocess.run([sys.executable, str(REPO_DIR / "starter.py"), "config"], env=env, cwd=tmp_path,
                          capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")[-2000:]
    shown = done.stdout.decode("utf-8")  # strictly: raises on bytes that are not UTF-8
    assert "BASIC_MODEL = caf\ufffd \ufffd \U0001f600" in shown
