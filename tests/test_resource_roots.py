"""Resources are confined to the operator's resource roots (security issue #8, item 8).

A private file outside the roots, one reached through a symlink inside a root, and ``../``
traversal are refused with a message naming the resource and ``DEERFLOW_RESOURCE_ROOTS``: at the
run's start (``load_run_config``), in the search activity itself, and by the CLI. Nothing of the
private file reaches the model, the history or the report.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.documents.index import _read
from activities.documents.retrieval import RESOURCE_NOT_FOUND, RESOURCE_OUTSIDE_ROOTS, RetrievalActivities
from activities.run_config import RunConfigActivities
from cli.research import _request
from config.resources import REPOSITORY, ResourcePolicy
from config.settings import Settings, load_settings
from offline.model_server import FakeModelServer
from runtime.front_door import CliError
from tests.support.history_checks import activity_events
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.calls.errors import failure_message
from workflows.contracts.research import Outcome
from workflows.contracts.status import Phase, RunStatus
from workflows.contracts.tool_activities import LocalSearchRequest

SECRET = "zebrafish-private-passphrase"
PUBLIC = "Our fleet trial found sodium-ion packs kept 91% capacity after 2,000 cycles."


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """``root/docs`` (allowed, with a symlink to a private file), ``private/`` outside the root."""
    root, private = tmp_path / "root", tmp_path / "private"
    (root / "docs").mkdir(parents=True)
    private.mkdir()
    (private / "secret.md").write_text(f"# Sodium-ion secret\n\nsodium-ion {SECRET}\n")
    (root / "docs" / "trial.md").write_text(f"# Sodium-ion trial\n\n{PUBLIC}\n")
    (root / "docs" / "leak.md").symlink_to(private / "secret.md")
    (root / "link.md").symlink_to(private / "secret.md")
    (root / "linked-folder").symlink_to(private, target_is_directory=True)
    return tmp_path


def layout_env(layout: Path) -> dict[str, str]:
    """The worker's settings for ``layout``, by env name: its home, and ``root`` as the only root."""
    return {"DEERFLOW_HOME": str(layout / "home"), "DEERFLOW_RESOURCE_ROOTS": str(layout / "root"),
            "DEERFLOW_CONF": str(layout / "absent.yaml"), "RAG_PROVIDER": "local"}


@pytest.fixture
def settings(layout: Path) -> Settings:
    return load_settings(environ=layout_env(layout))


@pytest.fixture
async def layout_worker(layout: Path, provider_env: dict[str, str], worker_with: WorkerWith) -> AsyncIterator[Client]:
    """A worker configured for ``layout``."""
    async with worker_with(settings_with(provider_env, **layout_env(layout))) as client:
        yield client


def refused_resources(tmp_path: Path) -> list[str]:
    """Ways to name the private file: directly, via ``..``, via a symlink, as a file:// URI."""
    return [
        str(tmp_path / "private" / "secret.md"),
        str(tmp_path / "root" / ".." / "private" / "secret.md"),
        str(tmp_path / "root" / "link.md"),
        str(tmp_path / "root" / "linked-folder"),
        str(tmp_path / "root" / "linked-folder" / "secret.md"),
        (tmp_path / "private" / "secret.md").as_uri(),
        str(tmp_path / "private"),
    ]


def assert_refusal(error: BaseException, resource: str) -> None:
    assert isinstance(error, ApplicationError)
    assert error.type == RESOURCE_OUTSIDE_ROOTS and error.non_retryable
    assert repr(resource) in error.message and "DEERFLOW_RESOURCE_ROOTS" in error.message


# ---------------------------------------------------------------- the policy


def policy(tmp_path: Path, **settings: object) -> ResourcePolicy:
    return ResourcePolicy.from_settings(Settings(DEERFLOW_HOME=tmp_path / "home", **settings))  # type: ignore[arg-type]


def test_the_default_root_is_resources_under_the_home(tmp_path: Path) -> None:
    default = policy(tmp_path)
    assert default.roots == ((tmp_path / "home" / "resources").resolve(),)
    assert default.allows((tmp_path / "home" / "resources" / "report.pdf").resolve())
    for closed in ("blobs/ab/cd", "documents.sqlite3", "temporal.db", "resources/.env"):
        assert not default.allows((tmp_path / "home" / closed).resolve()), closed


def test_the_workers_state_code_and_config_stay_closed_under_a_wide_root(tmp_path: Path) -> None:
    conf = tmp_path / "conf.yaml"
    wide = policy(tmp_path, DEERFLOW_RESOURCE_ROOTS="/", DEERFLOW_CONF=conf)
    assert wide.allows((tmp_path / "notes.md").resolve())
    for closed in (tmp_path / "home" / "blobs" / "x", REPOSITORY / "README.md", conf, Path("/proc/self/environ")):
        assert not wide.allows(closed.resolve()), closed
    assert not wide.allows((tmp_path / ".ssh" / "id_ed25519").resolve())  # hidden
    home_as_root = policy(tmp_path, DEERFLOW_RESOURCE_ROOTS=str(tmp_path / "home"))
    assert not home_as_root.allows((tmp_path / "home" / "blobs" / "x").resolve())  # naming it does not open it


def test_roots_come_from_conf_yaml_and_env_wins(tmp_path: Path) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text("RESOURCE_ROOTS:\n  - ~/papers\n  - /srv/docs\n")
    from_conf = load_settings(environ={"DEERFLOW_CONF": str(conf)})
    assert from_conf.allowed_resource_roots() == [Path("~/papers").expanduser(), Path("/srv/docs")]
    from_env = load_settings(environ={"DEERFLOW_RESOURCE_ROOTS": "/a:/b/../c"}, conf_path=conf)
    assert from_env.allowed_resource_roots() == [Path("/a"), Path("/c")]


# ---------------------------------------------------------------- the search activity (defence in depth)


async def search(settings: Settings, resources: list[str]) -> list[str]:
    request = LocalSearchRequest(query="sodium-ion", resources=resources, max_results=10)
    response = await ActivityEnvironment().run(RetrievalActivities(settings).local_search_tool, request)
    return [result.content for result in response.results]


async def test_the_search_refuses_every_way_of_naming_a_private_file(layout: Path, settings: Settings) -> None:
    for resource in refused_resources(layout):
        with pytest.raises(ApplicationError) as caught:
            await search(settings, [str(layout / "root" / "docs"), resource])
        assert_refusal(caught.value, resource)
        assert SECRET not in caught.value.message


async def test_a_missing_file_outside_the_roots_is_refused_not_reported_missing(
    layout: Path, settings: Settings
) -> None:
    # Otherwise the error would tell a requester which files exist outside the roots.
    with pytest.raises(ApplicationError) as outside:
        await search(settings, ["/etc/no-such-file.md"])
    assert_refusal(outside.value, "/etc/no-such-file.md")
    with pytest.raises(ApplicationError) as inside:
        await search(settings, [str(layout / "root" / "nope.md")])
    assert inside.value.type == RESOURCE_NOT_FOUND


async def test_a_symlink_found_while_walking_a_folder_is_skipped(layout: Path, settings: Settings) -> None:
    found = await search(settings, [str(layout / "root" / "docs")])
    assert any(PUBLIC in content for content in found)
    assert not any(SECRET in content for content in found)
    index = (layout / "home" / "documents.sqlite3").read_bytes()
    assert SECRET.encode() not in index


# ---------------------------------------------------------------- the run's start


async def test_load_run_config_refuses_outside_resources(layout: Path, settings: Settings) -> None:
    resource = str(layout / "root" / "link.md")
    load_run_config = RunConfigActivities(settings).load_run_config
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(load_run_config, [str(layout / "root" / "docs"), resource])
    assert_refusal(caught.value, resource)
    assert (await ActivityEnvironment().run(load_run_config, [str(layout / "root" / "docs")])).agent_recursion_limit


async def test_ragflow_resources_are_not_paths(layout: Path) -> None:
    ragflow = load_settings(environ={**layout_env(layout), "RAG_PROVIDER": "ragflow"})
    await ActivityEnvironment().run(RunConfigActivities(ragflow).load_run_config, ["rag://dataset/abc"])


async def test_a_run_naming_a_private_file_fails_at_once_and_leaks_nothing(
    layout_worker: Client, model_server: FakeModelServer, layout: Path
) -> None:
    resource = str(layout / "root" / ".." / "private" / "secret.md")
    handle = await start(layout_worker, auto_accept_plan=True, max_step_num=1, resources=[resource])
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    message = failure_message(caught.value.cause)
    assert "outside the worker's resource roots" in message and "DEERFLOW_RESOURCE_ROOTS" in message
    status = await handle.query("status", result_type=RunStatus)
    assert status.phase is Phase.FAILED
    assert model_server.requests == []  # failed before the first model call
    recorded = await handle.fetch_history()
    # The config (which checks the resources) loads before the coordinator's call is even scheduled.
    assert [events[0].activity_task_scheduled_event_attributes.activity_type.name
            for events in activity_events(recorded).values()] == ["load_run_config"]
    assert SECRET not in recorded.to_json()


async def test_a_symlink_in_a_resource_folder_leaks_nothing_into_a_run(
    layout_worker: Client, model_server: FakeModelServer, layout: Path
) -> None:
    handle = await start(layout_worker, auto_accept_plan=True, max_step_num=1,
                         resources=[str(layout / "root" / "docs")])
    result = await handle.result()
    assert result.outcome is Outcome.REPORT
    assert model_server.requests and SECRET not in str(model_server.requests)
    assert SECRET not in result.report
    assert SECRET not in (await handle.fetch_history()).to_json()


# ---------------------------------------------------------------- the CLI


def cli_args(resources: list[str]) -> argparse.Namespace:
    return argparse.Namespace(
        question="q", auto_accept=True, report_style=None, locale=None, max_steps=None, max_plan_iterations=None,
        max_search_results=None, resource=resources, review_timeout=None, review_timeout_action=None,
        parallel=False, clarify=False, no_background=False, no_web=False, deep_thinking=False, token_budget=None,
        cost_budget=None,
    )


def test_the_cli_refuses_outside_resources_and_says_what_to_do(layout: Path) -> None:
    settings = load_settings(environ=layout_env(layout))  # what the CLI's entry point loads
    resource = str(layout / "root" / "link.md")
    with pytest.raises(CliError) as caught:
        _request(cli_args([str(layout / "root" / "docs"), resource]), "q", settings)
    assert repr(resource) in str(caught.value)
    assert str((layout / "root").resolve()) in str(caught.value) and "DEERFLOW_RESOURCE_ROOTS" in str(caught.value)
    accepted = _request(cli_args([str(layout / "root" / "docs")]), "q", settings)
    assert accepted.resources == [str((layout / "root" / "docs").resolve())]


def test_the_index_never_reads_through_a_symlink(layout: Path) -> None:
    # A file checked on its real path but swapped for a symlink before it is read is not followed.
    assert _read(layout / "root" / "link.md") is None
    assert _read(layout / "root" / "docs" / "trial.md") == (layout / "root" / "docs" / "trial.md").read_bytes()
