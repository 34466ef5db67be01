"""Acceptance of issue #44 §3 end to end: ``starter.py replay --since`` over every closed run a dev
server keeps, on an encrypted deployment with a real worker process; a planted nondeterministic
change (a replayer given a modified workflow, in this test, not a change to the product) named
with its run and the event where it diverged; runs that cannot be read reported apart; and
``history --as-test`` growing the replay corpus with a scrubbed, plain history that replays as
tests/test_replay.py replays it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

import starter
import workflows.catalog
from runtime.blob_gc import payloads_in
from runtime.workflow_runner import workflow_runner
from tests.support.deployments import (
    PAGE_PHRASE,
    PAGE_SECRET,
    Deployment,
    Fakes,
    deployment,
    new_keys,
    providers,
    research,
)
from tests.support.processes import REPO_DIR
from tests.support.zygote import zygote
from workflows.catalog import WORKFLOWS
from workflows.contracts.research import TASK_QUEUE, ResearchResult
from workflows.research import workflow as research_module
from workflows.research.research_run import ResearchRun
from workflows.research.workflow import DeepResearchWorkflow

pytestmark = pytest.mark.timeout(300)


@dataclass
class Fleet:
    where: Deployment
    researched: str  # a research run with a background investigation
    replied: str  # a direct reply: no background investigation
    history: WorkflowHistory  # the research run's


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fakes]:
    with providers(tmp_path_factory.mktemp("fakes")) as shared:
        yield shared


@pytest.fixture(scope="module")
async def fleet(tmp_path_factory: pytest.TempPathFactory, fakes: Fakes) -> AsyncIterator[Fleet]:
    async with deployment(tmp_path_factory.mktemp("fleet"), fakes, DEERFLOW_ENCRYPTION_KEYS=new_keys()) as where:
        researched, _ = await research(where)
        replied = "replied-hello"
        started = where.starter("run", "hello", "--id", replied)
        assert started.returncode == 3, started.stdout + started.stderr  # a direct reply
        # A stranger's workflow, on a queue nobody polls, closed: not ours to replay.
        stranger = await where.client.start_workflow("SomeoneElsesWorkflow", "x", id="stranger",
                                                     task_queue=f"{TASK_QUEUE}-nobody")
        await stranger.terminate("not ours")
        history = await where.client.get_workflow_handle(researched).fetch_history()
        yield Fleet(where, researched, replied, history)


def test_every_closed_run_replays_with_this_code(fleet: Fleet) -> None:
    replayed = fleet.where.starter("replay", "--since", "1d")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "Replayed 2 runs: 2 deterministic, 0 nondeterministic; 0 could not be read." in replayed.stdout
    one = fleet.where.starter("replay", "--since", "1d", "--query", f"WorkflowId = '{fleet.replied}'")
    assert one.returncode == 0 and "Replayed 1 runs: 1 deterministic" in one.stdout, one.stdout + one.stderr
    refused = fleet.where.starter("replay", "--since", "1d", "--query", "NoSuchAttribute = 'x'")
    assert refused.returncode == 2 and "Could not list the runs to replay" in refused.stderr, refused.stderr


def test_runs_that_cannot_be_read_are_reported_apart(fleet: Fleet) -> None:
    keyless = fleet.where.starter("replay", "--since", "1d", DEERFLOW_ENCRYPTION_KEYS=None)
    assert keyless.returncode == 2, keyless.stdout + keyless.stderr
    assert f"UNREADABLE {fleet.researched}" in keyless.stdout and "NONDETERMINISTIC" not in keyless.stdout


@workflow.defn(dynamic=True, sandboxed=False)
class SkipsBackgroundInvestigation(DeepResearchWorkflow):
    """A careless change: the background search dropped without ``workflow.patched``."""

    @workflow.run
    async def run(self, inputs: Sequence[RawValue]) -> ResearchResult:
        return await super().run(inputs)


def the_background_search(history: WorkflowHistory) -> tuple[int, int]:
    """The background investigation's ActivityTaskScheduled event, and the task completion that recorded it."""
    event = next(event for event in history.events if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and event.activity_task_scheduled_event_attributes.activity_type.name == "web_search")
    return event.event_id, event.activity_task_scheduled_event_attributes.workflow_task_completed_event_id


def test_a_planted_nondeterministic_change_is_named_with_its_run_and_event(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    async def skip(_run: ResearchRun, _topic: str) -> None:
        return None

    monkeypatch.setattr(research_module, "investigate", skip)
    monkeypatch.setattr(workflows.catalog, "WORKFLOWS", (SkipsBackgroundInvestigation,))
    for name, value in fleet.where.cli_env().items():
        monkeypatch.setenv(name, value)
    scheduled, completed = the_background_search(fleet.history)
    run_id = fleet.history.events[0].workflow_execution_started_event_attributes.original_execution_run_id
    where = (f"diverges at event {scheduled} (activity task scheduled: web_search), in the workflow task "
             f"completed at event {completed}: [TMPRL1100] Nondeterminism error: Activity type of scheduled event "
             "'web_search' does not match activity type of activity command 'chat'")

    assert starter.main(["replay", "--since", "1d"]) == 1
    out = capsys.readouterr().out
    assert f"NONDETERMINISTIC {fleet.researched} (run {run_id}): {where}" in out, out
    assert "Replayed 2 runs: 1 deterministic, 1 nondeterministic; 0 could not be read." in out
    assert starter.main(["replay", fleet.researched]) == 1
    assert f"Replay FAILED for {fleet.researched}: it {where}" in capsys.readouterr().out


def test_history_as_test_adds_a_scrubbed_plain_history_to_the_replay_corpus(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "tests" / "histories").mkdir(parents=True)
    env = fleet.where.cli_env(SUPPORT_DESK_TOKEN=PAGE_SECRET)

    def as_test(*args: str, cwd: Path = tmp_path) -> tuple[int, str]:
        done = zygote().run(REPO_DIR / "starter.py", ["history", fleet.researched, "--as-test", *args], env=env,
                            cwd=cwd, timeout=120)
        return done.returncode, done.stdout + done.stderr

    code, said = as_test("from_a_real_run")
    written = tmp_path / "tests" / "histories" / "from_a_real_run.json"
    assert code == 0 and "replays with this code" in said and str(written) in said, said
    recorded = WorkflowHistory.from_json(written.stem, written.read_text())
    data = b"".join(payload.data for event in recorded.events for payload in payloads_in(event))
    assert PAGE_PHRASE.encode() in data  # the crawled page, out of the blob store and decrypted
    assert PAGE_SECRET.encode() not in data and b"[redacted]" in data
    encodings = {payload["metadata"]["encoding"] for payload in _payloads(recorded.to_json_dict())}
    assert encodings == {"anNvbi9wbGFpbg=="}, encodings  # json/plain: no blob references, subtrees or ciphertext
    code, said = as_test("from_a_real_run")
    assert code == 2 and "exists" in said, said
    code, said = as_test(cwd=tmp_path / "tests")
    assert code == 2 and "run it from the checkout's top folder" in said, said


async def test_the_corpus_file_replays_as_the_replay_test_does(fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "tests" / "histories").mkdir(parents=True)
    done = zygote().run(REPO_DIR / "starter.py", ["history", fleet.researched, "--as-test", "corpus_check"],
                        env=fleet.where.cli_env(), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    path = tmp_path / "tests" / "histories" / "corpus_check.json"
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=pydantic_data_converter,
                        workflow_runner=workflow_runner())
    result = await replayer.replay_workflow(WorkflowHistory.from_json(path.stem, path.read_text()),
                                            raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


def _payloads(node: object) -> Iterator[dict]:
    if isinstance(node, dict):
        if isinstance(node.get("metadata"), dict) and "encoding" in node["metadata"]:
            yield node
            return
        for value in node.values():
            yield from _payloads(value)
    elif isinstance(node, list):
        for value in node:
            yield from _payloads(value)
