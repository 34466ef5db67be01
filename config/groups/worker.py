"""The worker process: concurrency per provider and per queue, a run's limits, the offline
providers, and how lost attempts are reclaimed and a stopping worker drains."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from config.groups.base import SettingsGroup

# The shortest stall DEERFLOW_WORKER_STALL_SECONDS may set (the suite's wedged worker uses 10).
MIN_STALL_SECONDS = 5.0


class WorkerSettings(SettingsGroup):
    """What ``worker.py`` and the workflow's run configuration read (hosting/, workflows/calls/queues.py)."""

    # Per-provider concurrency inside one worker process (see activities/support/limits.py).
    llm_max_concurrency: int = Field(default=8, ge=1, alias="LLM_MAX_CONCURRENCY")
    """Concurrent model calls in one worker."""
    search_max_concurrency: int = Field(default=4, ge=1, alias="SEARCH_MAX_CONCURRENCY")
    """Concurrent searches in one worker."""
    crawl_max_concurrency: int = Field(default=4, ge=1, alias="CRAWL_MAX_CONCURRENCY")
    """Concurrent crawls in one worker."""
    # The provider's quotas (issue #26). Requests per second: across every worker of the model queue,
    # Temporal's task-queue rate limit (hosting/registry.py), since no one process sees the fleet;
    # it also keeps model calls off the main queue (activities/run_config.py), where no cap applies.
    # Tokens per minute (TPM, as providers' consoles say; a name with TOKEN in it would be taken for a
    # credential and masked): per worker process (activities/support/limits.py), the estimate a
    # provider counts (prompt plus output cap). Unset: no cap.
    llm_requests_per_second: float | None = Field(default=None, gt=0, le=10_000, alias="LLM_REQUESTS_PER_SECOND")
    """Model requests per second across every worker of the model queue (the queue's rate limit; see Quotas)."""
    llm_tokens_per_minute: int | None = Field(default=None, ge=1, alias="LLM_TPM")
    """Model tokens per minute (prompt plus output cap) in one worker process (see Quotas)."""
    # Activities one worker runs at once per task queue (workflows/calls/queues.py). A worker takes no
    # more tasks than it can run, so the rest wait on the server for another worker. The model
    # queue defaults to LLM_MAX_CONCURRENCY: a slot held while waiting on the provider semaphore
    # would be a task another worker could have run.
    main_queue_concurrency: int = Field(default=32, ge=1, le=10_000, alias="DEERFLOW_MAIN_QUEUE_CONCURRENCY")
    """Activities one worker runs at once on the main queue (see Deploying)."""
    model_queue_concurrency: int | None = Field(default=None, ge=1, le=10_000, alias="DEERFLOW_MODEL_QUEUE_CONCURRENCY")
    """The same, model queue. Unset: `LLM_MAX_CONCURRENCY`."""
    tools_queue_concurrency: int = Field(default=16, ge=1, le=10_000, alias="DEERFLOW_TOOLS_QUEUE_CONCURRENCY")
    """The same, tools queue."""
    sandbox_queue_concurrency: int = Field(default=2, ge=1, le=1_000, alias="DEERFLOW_SANDBOX_QUEUE_CONCURRENCY")
    """The same, sandbox queue."""
    # Model and tool calls of a run whose workflow worker also serves the model / tools queues go on
    # the run's main queue, so the server hands each one straight back to that worker with the
    # workflow task that asked for it (eager dispatch: no queue hop, ~25 ms less per call here).
    # false: every kind on its own queue, so separately scaled model / tools workers share the work.
    eager_activities: bool = Field(default=True, alias="DEERFLOW_EAGER_ACTIVITIES")
    """Model and tool calls go on the main queue when the workflow's worker serves their queues too (eager dispatch;
    see Deploying).
    """

    # Continue a run as new once its history has this many events (unset: when the server suggests).
    continue_as_new_after_events: int | None = Field(default=None, ge=10, alias="DEERFLOW_CONTINUE_AS_NEW_EVENTS")
    """Continue a run as new past this many history events. Unset: when the server suggests it."""

    # Workflow runs kept in the worker's cache. A paused run in the cache costs about 220 KiB; an
    # evicted one costs nothing until its next task, when it replays (bench/README.md).
    max_cached_workflows: int = Field(default=1000, ge=0, alias="DEERFLOW_MAX_CACHED_WORKFLOWS")
    """Runs kept in the worker's cache; lower it (e.g. 100) when many runs wait for review (bench/README.md)."""

    # What one model reply can make a run do (issue #8): tool calls run per model turn (the rest
    # are answered "dropped"), and activities one run keeps in flight at once. Both stay far below
    # the server's 2,000 pending activities per run, past which a run is stuck for good.
    max_tool_calls_per_turn: int = Field(default=16, ge=1, le=256, alias="DEERFLOW_MAX_TOOL_CALLS_PER_TURN")
    """Tool calls one model reply may run (1–256). See Security."""
    max_activities_in_flight: int = Field(default=32, ge=1, le=500, alias="DEERFLOW_MAX_ACTIVITIES_IN_FLIGHT")
    """Activities one run keeps pending (1–500)."""
    # A run's token budget (workflows/research/budget.py): the default a run gets, and the most a request or a
    # person's raise may give it. Unset: no budget unless the request sets one, and no maximum.
    run_token_budget: int | None = Field(default=None, ge=1, alias="DEERFLOW_RUN_TOKEN_BUDGET")
    """A run's default token budget (see Budgets)."""
    run_token_budget_max: int | None = Field(default=None, ge=1, alias="DEERFLOW_RUN_TOKEN_BUDGET_MAX")
    """The most a request or a raise may give a run, and the budget of one that names none without a default (see
    Budgets).
    """
    # The same for its cost in USD, at DEERFLOW_MODEL_PRICES (an unpriced model's calls cost nothing).
    run_cost_budget_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                              alias="DEERFLOW_RUN_COST_BUDGET_USD")
    """A run's default cost budget in USD, at `DEERFLOW_MODEL_PRICES` (see Budgets)."""
    run_cost_budget_usd_max: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                                  alias="DEERFLOW_RUN_COST_BUDGET_USD_MAX")
    """The most cost budget a request or a raise may give a run, and the cost budget of one that names none without a
    default (see Budgets).
    """

    # Set by the worker when it serves the bundled offline demonstration providers: the model
    # (DEERFLOW_OFFLINE_DEMO), the search corpus (DEERFLOW_OFFLINE_SEARCH), or both.
    offline_demo: bool = Field(default=False, alias="DEERFLOW_OFFLINE_DEMO")
    """Set by the worker when it serves the offline demonstration model; not an operator's setting."""
    offline_search: bool = Field(default=False, alias="DEERFLOW_OFFLINE_SEARCH")
    """Set by the worker when it serves the offline search corpus; not an operator's setting."""
    # Seconds each offline fake waits before it answers, as real providers do: for demos, crash
    # drills and benchmarks, which need a run slow enough to interrupt.
    offline_model_latency: float = Field(default=0.0, ge=0, le=600, alias="DEERFLOW_OFFLINE_MODEL_LATENCY")
    """Seconds the offline model waits before it answers (demos, crash drills, benchmarks)."""
    offline_search_latency: float = Field(default=0.0, ge=0, le=600, alias="DEERFLOW_OFFLINE_SEARCH_LATENCY")
    """The same for the offline search."""

    # Reclaiming a dead worker's attempts (hosting/inflight_journal.py, hosting/reclaim.py):
    # each worker process journals the task tokens of its attempts in flight under <home>/inflight,
    # and a worker starting on the same machine fails those of dead processes at once, so they are
    # retried without waiting for their heartbeat timeouts. Off: no journal and no reclaim.
    reclaim_lost_attempts: bool = Field(default=True, alias="DEERFLOW_RECLAIM_LOST_ATTEMPTS")
    """A starting worker fails the in-flight attempts of dead workers on this machine (journals under
    `DEERFLOW_HOME/inflight/`), so they are retried at once.
    """
    # How long a call whose attempts keep being lost with their workers (heartbeat timeouts, crashes,
    # shutdowns) is retried before its run fails (hosting/retry_window.py); the provider's own
    # errors are bounded by count instead. Seconds, or an ISO 8601 duration (PT6H).
    worker_retry_window: timedelta = Field(default=timedelta(hours=6), gt=timedelta(0),
                                           alias="DEERFLOW_WORKER_RETRY_WINDOW")
    """How long a call whose attempts keep being lost with their workers is retried before its run fails; seconds or
    ISO 8601 (`PT6H`).
    """

    @field_validator("worker_retry_window", mode="before")
    @classmethod
    def _seconds_or_iso(cls, value: Any) -> Any:
        """A plain number is seconds, as in every other duration setting; pydantic would refuse it as text."""
        if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
            return float(value)
        return value
    # Seconds a worker told to stop (SIGTERM, SIGINT) waits for its activities in flight to finish,
    # polling no more, before it cancels them to be retried elsewhere: a deploy must not pay for a
    # model call twice. The default is the model call's start-to-close timeout
    # (workflows/calls/activity_options.py), so a call that could still succeed is never cut; docker-compose.yml's
    # stop_grace_period is set a little above it. A second signal stops the worker at once.
    worker_shutdown_grace: float = Field(default=300.0, ge=0, le=86_400, alias="DEERFLOW_WORKER_SHUTDOWN_GRACE")
    """Seconds a worker given SIGTERM/SIGINT lets its calls in flight finish before cancelling them; a second signal
    stops it at once. Keep compose's `stop_grace_period` above it.
    """
    # Seconds the worker's event loop may run nothing before the worker ends itself (status 1, every
    # thread's traceback in its log) so that its supervisor starts a new one (runtime/stall_watchdog.py):
    # a stuck loop wedges every run the worker touches while its process looks alive. Far above a loaded
    # host's lag (seconds) and above every call's heartbeat timeout (4-10 s), past which its calls were
    # already being retried. 0: never; otherwise at least MIN_STALL_SECONDS.
    worker_stall_seconds: float = Field(default=60.0, ge=0, le=86_400, alias="DEERFLOW_WORKER_STALL_SECONDS")
    """Seconds the worker's event loop may run nothing before the worker exits (status 1, every thread's traceback in
    its log) for its supervisor to replace ("When a worker or the server dies"); `0`: never, otherwise at least `5`
    (a loaded host's ordinary lag would end healthy workers).
    """

    @field_validator("worker_stall_seconds")
    @classmethod
    def _off_or_above_lag(cls, value: float) -> float:
        """A stall of a second or two is a loaded host's ordinary lag: it would end healthy workers."""
        if 0 < value < MIN_STALL_SECONDS:
            raise ValueError(f"0 (never) or at least {MIN_STALL_SECONDS:g} seconds")
        return value
