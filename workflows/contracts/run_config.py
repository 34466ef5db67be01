"""What the workflow learns of its worker's configuration, through the ``load_run_config`` activity."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workflows.contracts.base import Contract
from workflows.contracts.budget import ReportReserve


class RunConfig(Contract):
    """Worker-side settings the workflow needs, read once per run through an activity.

    Reading them through an activity records them in history, so replay sees the same values
    even if the worker's environment has changed since.
    """

    agent_recursion_limit: int = 25
    offline_demo: bool = False  # the bundled offline model serves the run
    offline_search: bool = False  # the bundled search corpus serves its searches
    search_attributes_enabled: bool = False  # the namespace has our custom search attributes
    # Continue as new once a run's history has this many events (None: only when the server
    # suggests it). Lets operators keep histories short, and tests exercise the hand-over.
    continue_as_new_after_events: int | None = None
    # Tool calls run per model turn (the rest are answered "dropped"), and activities a run keeps
    # in flight at once. None (runs recorded before these limits existed): no limit, as then.
    max_tool_calls_per_turn: int | None = None
    max_activities_in_flight: int | None = None
    # Kinds of work this run schedules on its main queue rather than their own, because the worker
    # that read this config serves them beside the workflow: the server then dispatches each call
    # eagerly to the worker that asked for it. Empty (and in runs recorded before it): own queues.
    main_queue_kinds: list[Literal["model", "tools"]] = Field(default_factory=list)
    # LLM_TOOL_MODE of the worker that read this config (issue #24); None: runs from before it.
    llm_tool_mode: Literal["native", "json", "auto"] | None = None
    token_budget_default: int | None = None  # the operator's per-run token budget (None: none)
    token_budget_max: int | None = None  # and the most a request or a raise may have
    cost_budget_usd_default: float | None = None  # the same in USD, at the operator's model prices
    cost_budget_usd_max: float | None = None
    report_reserve: ReportReserve | None = None  # kept free for the report (None: runs from before it)
