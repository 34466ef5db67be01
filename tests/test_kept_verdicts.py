"""Tool-support verdicts kept in the worker's home (activities/model/kept_verdicts.py): a worker
started on the same home does not probe a provider its predecessor found working, and nothing
else carries over."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.model.kept_verdicts import FILENAME, KeptVerdicts, digest
from activities.model.llm import ModelActivities
from activities.model.tool_support import PROBE_TTL_SECONDS, ProbeAnswer, ToolSupport, Verdict
from offline.model_server import FakeModelServer
from tests.support.settings import settings_with
from tests.test_tool_support import coordinator
from workflows.contracts.usage import Usage

KEY = ("https://user:secret@models.example/v1", "qwen-7b")


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def probes(server: FakeModelServer) -> int:
    return sum(1 for body in server.requests if body.get("tool_choice") == "required")


async def test_a_worker_started_on_the_same_home_sends_no_probe_its_predecessor_sent(
        provider_env: dict[str, str], model_server: FakeModelServer, tmp_path: Path) -> None:
    settings = settings_with(provider_env, DEERFLOW_HOME=str(tmp_path))
    before = await ActivityEnvironment().run(ModelActivities(settings).chat, coordinator("Hello!"))
    assert before.message.content and probes(model_server) == 1  # a text reply: the first worker probes
    after = await ActivityEnvironment().run(ModelActivities(settings).chat, coordinator("Thanks!"))
    assert after.message.content and not after.message.tool_calls
    assert probes(model_server) == 1 and len(model_server.requests) == 3  # the next worker asked once, no probe
    assert after.usage.llm_calls == 1


async def test_a_worker_on_another_home_probes_again(
        provider_env: dict[str, str], model_server: FakeModelServer, tmp_path: Path) -> None:
    for home in (tmp_path / "a", tmp_path / "b"):
        home.mkdir()
        settings = settings_with(provider_env, DEERFLOW_HOME=str(home))
        await ActivityEnvironment().run(ModelActivities(settings).chat, coordinator("Hello!"))
    assert probes(model_server) == 2


def test_only_tools_that_work_are_kept(tmp_path: Path) -> None:
    """A negative verdict, or one forgotten after it failed a run, leaves nothing behind: an operator
    who fixes the server and restarts the worker gets a fresh probe."""
    clock = Clock()
    first = ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS, clock))
    first.remember(KEY, ProbeAnswer(Verdict.CALLS, Usage()))
    assert ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS, clock)).known(KEY) is Verdict.CALLS
    first.remember(KEY, ProbeAnswer(Verdict.IGNORED, Usage()))
    assert ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS, clock)).known(KEY) is None
    first.remember(KEY, ProbeAnswer(Verdict.CALLS, Usage()))
    first.forget(KEY)
    assert ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS, clock)).known(KEY) is None


def test_a_kept_verdict_lasts_what_is_left_of_its_lifetime(tmp_path: Path) -> None:
    wall = Clock()
    ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS, wall)).remember(KEY, ProbeAnswer(Verdict.CALLS, Usage()))
    wall.now += PROBE_TTL_SECONDS - 100  # the next worker starts 100 s before the verdict expires
    monotonic = Clock(50.0)
    inherited = ToolSupport(clock=monotonic, kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS, wall))
    monotonic.now += 99
    assert inherited.known(KEY) is Verdict.CALLS
    monotonic.now += 2
    assert inherited.known(KEY) is None
    wall.now += 101  # expired: a worker started now inherits nothing
    assert ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS, wall)).known(KEY) is None


def test_the_file_names_no_endpoint(tmp_path: Path) -> None:
    ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS)).remember(KEY, ProbeAnswer(Verdict.CALLS, Usage()))
    text = (tmp_path / FILENAME).read_text()
    assert digest(*KEY) in text
    assert "secret" not in text and "models.example" not in text and "qwen" not in text


def test_a_broken_or_unwritable_file_is_only_a_probe_more(tmp_path: Path) -> None:
    name, clock = digest(*KEY), Clock()
    for broken in ("{not json", "[1, 2]", json.dumps({name: "yesterday"}), json.dumps({name: True}),
                   json.dumps({name: clock.now + 3600})):  # from the future: it would never expire
        (tmp_path / FILENAME).write_text(broken)
        assert ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS, clock)).known(KEY) is None
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    support = ToolSupport(kept=KeptVerdicts(not_a_folder, PROBE_TTL_SECONDS))
    support.remember(KEY, ProbeAnswer(Verdict.CALLS, Usage()))  # cannot be written: kept in memory only
    assert support.known(KEY) is Verdict.CALLS


def test_an_inherited_verdict_forgotten_before_its_first_use_stays_forgotten(tmp_path: Path) -> None:
    ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS)).remember(KEY, ProbeAnswer(Verdict.CALLS, Usage()))
    inherited = ToolSupport(kept=KeptVerdicts(tmp_path, PROBE_TTL_SECONDS))
    inherited.forget(KEY)
    assert inherited.known(KEY) is None
