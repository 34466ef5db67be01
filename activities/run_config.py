"""The ``load_run_config`` activity: hands the workflow the worker-side settings it needs.

The workflow may not read the environment (replay would see a different one). Reading the
settings once per run through an activity records them in history instead.

It is also the run's first activity, so it refuses the request's local ``resources`` that no
search would be allowed to read (outside the resource roots, or missing): the run fails at once
with a message naming the resource and ``DEERFLOW_RESOURCE_ROOTS``, instead of researching
without the documents the user asked for.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from temporalio import activity

from activities.documents.retrieval import check_resources
from activities.model.report_reserve import report_reserve
from config.settings import Settings
from workflows.calls.queues import QUEUE_KINDS, QueueKind
from workflows.contracts.run_config import RunConfig

# Never the sandbox: model-written code runs only on the sandbox's own workers.
EAGER_KINDS: tuple[Literal["model", "tools"], ...] = ("model", "tools")


def main_queue_kinds(settings: Settings, served: Collection[QueueKind]) -> list[Literal["model", "tools"]]:
    """The kinds a run started here schedules on its main queue: those this worker serves beside
    the workflow (so the server can hand each call back to it eagerly), unless the operator keeps
    every kind on its own queue (``DEERFLOW_EAGER_ACTIVITIES=false``). Model calls keep their own
    queue under a fleet-wide request cap (``LLM_REQUESTS_PER_SECOND``): the server applies it to that
    queue only, and an eager call never passes through a queue at all."""
    if not settings.eager_activities or "main" not in served:
        return []
    capped = {"model"} if settings.llm_requests_per_second is not None else set()
    return [kind for kind in EAGER_KINDS if kind in served and kind not in capped]


class RunConfigActivities:
    """``load_run_config``, built with the worker's settings and what the worker found at start:
    whether the namespace has the custom search attributes (runtime/search_attributes.py), and
    which queues it serves."""

    def __init__(self, settings: Settings, search_attributes_enabled: bool = False,
                 served: Collection[QueueKind] = QUEUE_KINDS) -> None:
        self.settings = settings
        self.search_attributes_enabled = search_attributes_enabled
        self.served = tuple(served)

    @activity.defn(name="load_run_config")
    async def load_run_config(self, resources: list[str] | None = None) -> RunConfig:
        settings = self.settings
        check_resources(resources or [], settings)
        return RunConfig(
            agent_recursion_limit=settings.agent_recursion_limit,
            offline_demo=settings.offline_demo,
            offline_search=settings.offline_search,
            search_attributes_enabled=self.search_attributes_enabled,
            continue_as_new_after_events=settings.continue_as_new_after_events,
            max_tool_calls_per_turn=settings.max_tool_calls_per_turn,
            max_activities_in_flight=settings.max_activities_in_flight,
            main_queue_kinds=main_queue_kinds(settings, self.served),
            llm_tool_mode=settings.llm_tool_mode,
            token_budget_default=settings.run_token_budget,
            token_budget_max=settings.run_token_budget_max,
            cost_budget_usd_default=settings.run_cost_budget_usd,
            cost_budget_usd_max=settings.run_cost_budget_usd_max,
            report_reserve=report_reserve(settings),
        )
