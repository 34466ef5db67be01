"""A run with a real model but the bundled search corpus (no search key), or the reverse, is
announced like the full offline mode (issue #11): the banner, the status, the Web UI details and
the saved report say which bundled provider served it. Until then it said nothing, with
``offline_demo: false``.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from cli.render import status_text
from cli.runs import _write_report
from cli.watch import render_status
from config.settings import load_settings
from offline.providers import (
    OFFLINE_BANNER,
    OFFLINE_MODEL_BANNER,
    OFFLINE_SEARCH_BANNER,
    offline_banner,
    start_offline_providers,
)
from runtime import front_door as connection
from runtime.embedded import EmbeddedStack
from tests.support.runs import start
from tests.support.settings import settings_with
from tests.support.workers import WorkerWith
from workflows.contracts.research import ResearchResult
from workflows.contracts.status import Phase, RunStatus
from workflows.research.progress import current_details
from workflows.research.status_view import OFFLINE_MODEL_NOTICE, OFFLINE_NOTICE, OFFLINE_SEARCH_NOTICE, offline_notice


@pytest.mark.parametrize(("environ", "banner"), [
    ({}, OFFLINE_BANNER),
    ({"OPENAI_API_KEY": "sk-real"}, OFFLINE_SEARCH_BANNER),
    ({"TAVILY_API_KEY": "tvly-real"}, OFFLINE_MODEL_BANNER),
    ({"OPENAI_API_KEY": "sk-real", "TAVILY_API_KEY": "tvly-real"}, None),
    ({"OPENAI_API_KEY": "sk-real", "SEARCH_API": "duckduckgo"}, None),  # a keyless real search
], ids=["all-offline", "real-model", "real-search", "all-real", "keyless-search"])
def test_the_banner_names_the_bundled_providers(environ: dict[str, str], banner: str | None) -> None:
    assert offline_banner(load_settings(environ)) == banner


def test_the_cli_announces_a_worker_with_the_offline_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    connection._announce_worker(EmbeddedStack(load_settings({"OPENAI_API_KEY": "sk-real"})))
    assert OFFLINE_SEARCH_BANNER in capsys.readouterr().err


def test_a_worker_with_a_real_model_serves_the_corpus_and_says_so_in_its_settings() -> None:
    providers = start_offline_providers(load_settings({"OPENAI_API_KEY": "sk-real"}))
    try:
        assert providers.model is None and providers.search is not None
        settings = load_settings(environ={"OPENAI_API_KEY": "sk-real", **providers.overrides})
        assert settings.offline_search and not settings.offline_demo
    finally:
        providers.stop()


async def test_a_run_on_the_offline_corpus_says_so_in_status_details_watch_and_report(
    worker_with: WorkerWith, provider_env: dict[str, str], tmp_path: Path,
) -> None:
    offline_search_only = settings_with(provider_env, DEERFLOW_OFFLINE_DEMO="", DEERFLOW_OFFLINE_SEARCH="1")
    async with worker_with(offline_search_only) as client:
        handle = await start(client, auto_accept_plan=True, max_step_num=1)
        result = await handle.result()
        status = await handle.query("status", result_type=RunStatus)
    assert status.offline_demo and status.offline_providers == ["search"]
    assert offline_notice(status) == OFFLINE_SEARCH_NOTICE
    assert f"*{OFFLINE_SEARCH_NOTICE}*" in current_details(status)
    assert OFFLINE_SEARCH_NOTICE in status_text(handle.id, status)
    out = io.StringIO()
    Console(file=out, width=200).print(render_status(status, handle.id, datetime.now(UTC)))
    assert "offline search corpus" in out.getvalue()
    saved = tmp_path / "report.md"
    _write_report(result, str(saved), offline_notice(status))
    assert saved.read_text().startswith(f"> {OFFLINE_SEARCH_NOTICE}\n\n")


def test_each_mix_has_its_notice_and_a_run_from_before_the_list_keeps_the_full_one() -> None:
    def notice(**fields: object) -> str | None:
        return offline_notice(RunStatus(phase=Phase.COMPLETED, **fields))  # type: ignore[arg-type]

    assert notice(offline_demo=True, offline_providers=["model", "search"]) == OFFLINE_NOTICE
    assert notice(offline_demo=True, offline_providers=["model"]) == OFFLINE_MODEL_NOTICE
    assert notice(offline_demo=True) == OFFLINE_NOTICE  # recorded before offline_providers existed
    assert notice() is None
    _write_report(ResearchResult(report="# R"), None, None)  # a real run's report has no notice
