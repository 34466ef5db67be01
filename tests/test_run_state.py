"""The run's state, and the status the ``status`` query builds from it (issue #20).

A continuation checkpoint crosses versions both ways during a deploy: the one in
``fixtures/checkpoint_before_status_view.json`` was written by the version that kept a copy of the
plan, its count and the locale in the status. This version must read it, and write the same
content back, so that version can read what this one writes.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic_core import to_json

from workflows.contracts.run_config import RunConfig
from workflows.research.run_state import DEFAULT_LOCALE, RunState

CHECKPOINT = Path(__file__).parent / "fixtures" / "checkpoint_before_status_view.json"


def _kept(old: object, new: object) -> bool:
    """Every value of ``old`` is in ``new``; ``new`` may add fields (at their defaults) that later
    code introduced."""
    if isinstance(old, dict) and isinstance(new, dict):
        return all(key in new and _kept(value, new[key]) for key, value in old.items())
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_kept(a, b) for a, b in zip(old, new, strict=True))
    return old == new


def test_a_checkpoint_from_before_the_view_is_read_and_written_back_the_same() -> None:
    written = json.loads(CHECKPOINT.read_text())
    state = RunState.model_validate(written)
    back = json.loads(to_json(state))
    assert _kept(written, back)
    assert RunState.model_validate(back) == state  # and what later code adds reads back the same


def test_the_status_shows_the_state_it_is_built_from() -> None:
    state = RunState.model_validate_json(CHECKPOINT.read_text())
    status = state.view()
    assert status.plan == state.plan and status.plan_iterations == 1 and status.locale == "de-DE"
    assert status.offline_demo and status.offline_providers == ["model"]
    assert status.events == state.status.events and status.usage.llm_calls == 3

    state.plan_iterations += 1
    state.config = RunConfig(offline_demo=True, offline_search=True)
    status = state.view()
    assert status.plan_iterations == 2 and status.offline_providers == ["model", "search"]


def test_before_the_handoff_the_status_names_no_locale() -> None:
    state = RunState()
    assert state.view().locale is None and not state.view().offline_demo
    assert state.report_locale == DEFAULT_LOCALE
