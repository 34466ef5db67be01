"""One table of activity options: timeouts, retries, heartbeat and timeline summary per kind.

Every activity the workflow schedules goes through ``execute`` with one entry of this table, so
a kind's limits are read in one place instead of at each call site. The heartbeat *interval* is
not here: each activity derives it from the heartbeat timeout it was scheduled with
(``runtime/heartbeat.py``), so the two cannot drift apart.

Each kind names the queue it runs on (``workflows/calls/queues.py``). Runs recorded before a kind had
its own queue keep scheduling it on the run's main queue: the queue is part of each scheduling
command, so the choice is behind a patch per move, and every worker keeps registering every
activity on the main queue for those runs. A run may also keep a kind on its main queue by its
config; each call passes that choice in (``QueueRouting``), read from nowhere else.

The summary is the line the Web UI shows for the activity in the run's event history. Summaries
are built from model-chosen text (queries, URLs), so they are cut to one short line, carry a
URL's host only (never its path, query or credentials) and have link and HTML syntax escaped.
Building one never raises: a malformed URL must not fail a workflow task.

Two kinds of retry, bounded apart (issue #19). An attempt lost with its worker (a heartbeat or
start-to-close timeout, a crash reclaimed as ``WorkerLost``, a shutdown) says nothing about the
provider, and a starved or restarted worker may lose many in a row: kinds with
``provider_attempts`` schedule with unlimited attempts and no schedule-to-close, so only the
operator's ``DEERFLOW_WORKER_RETRY_WINDOW`` ends those retries (hosting/retry_window.py). A
failure the activity raises itself (a 5xx, a refused connection) is the provider's: the activity
counts those across attempts and makes the kind's ``provider_attempts``-th final
(activities/support/retry_pacing.py), so a provider that stays down still ends the run with its error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from workflows.calls.queues import QueueKind, QueueRouting, queue_name
    from workflows.contracts.artefact import ArtefactRef
    from workflows.contracts.chat import ChatRequest
    from workflows.contracts.evaluation import MeasureRequest
    from workflows.contracts.fork_point import ForkPoint
    from workflows.contracts.podcast import SpeechRequest
    from workflows.contracts.slides import Deck
    from workflows.contracts.tool_activities import (
        CrawlRequest,
        LocalSearchRequest,
        MCPCallRequest,
        MCPListRequest,
        PythonRequest,
        SearchRequest,
    )

InputT = TypeVar("InputT")
ResultT = TypeVar("ResultT")

# A call in flight on a dead worker is retried after this long instead of its start-to-close.
HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# Model calls and web searches only wait on the network, beating from the event loop
# (runtime/heartbeat.py), and the worker sends a received beat on within
# HEARTBEAT_THROTTLE (hosting/registry.py): a lost one is noticed in 3-4 s, and a live one is
# declared lost only if its worker's event loop stalls for about 3 s. Measured beside two busy
# loops (bench/crash_cost.py --false-alarms): the longest gap between beats was 1.2-2.5 s, and a
# 3 s timeout (2 s of stall) lost one call in three runs. Kinds that run CPU work, tools with side
# effects and the sandbox keep the longer timeout.
QUICK_HEARTBEAT_TIMEOUT = timedelta(seconds=4)
HEARTBEAT_THROTTLE = timedelta(seconds=1)
# The first retry of an attempt the server gave up on (its worker died): the policy's initial
# interval. Failures the activity raises itself keep their kind's ``failure_backoff`` instead
# (activities/support/retry_pacing.py), so a provider that is down is not hammered. Nothing failed on the
# provider's side when a worker died, so there is nothing to wait for. A worker restarted on the
# same machine fails its dead predecessor's attempts itself (hosting/reclaim.py) with this delay.
LOST_ATTEMPT_RETRY = timedelta(milliseconds=100)
# A call cancelled because its run was cancelled ends the run cancelled (issue #49). The SDK answers
# it with an ActivityError, which the run took for the call's failure: a model call's ended the run
# Failed ("Cancelled"), and one whose failure is forgiven (the background search, a tool call, an
# MCP listing) let the run go on and pay for its next calls. Runs recorded before it replay as they ran.
CANCELLED_CALL_PATCH = "cancelled-call-cancels"
SUMMARY_MAX_CHARS = 80
_MARKUP = str.maketrans({char: "\\" + char for char in "\\[]<>`"})


def summary_text(text: str) -> str:
    """Untrusted text as a summary fragment: one line, at most ``SUMMARY_MAX_CHARS``, no markup."""
    flat = " ".join(text.split())
    if len(flat) > SUMMARY_MAX_CHARS:
        flat = flat[: SUMMARY_MAX_CHARS - 1] + "…"
    return flat.translate(_MARKUP)


def url_host(url: str) -> str:
    """The host a URL names, or a placeholder: summaries never carry paths, queries or userinfo."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        host = None
    return summary_text(host) if host else "(no host)"


@dataclass(frozen=True)
class Backoff:
    """Retry delays for the failures an activity raises, apart from its retry policy's interval."""

    initial: timedelta
    coefficient: float
    maximum: timedelta

    def delay(self, attempt: int) -> timedelta:
        """The wait after attempt ``attempt`` (1-based) failed, as a retry policy would compute it."""
        return min(self.maximum, self.initial * self.coefficient ** (attempt - 1))


@dataclass(frozen=True)
class ActivityOptions(Generic[InputT]):
    """How one kind of activity is scheduled, and the default line it shows in the timeline."""

    name: str
    start_to_close: timedelta
    schedule_to_close: timedelta | None
    heartbeat_timeout: timedelta | None
    retry: RetryPolicy | None  # None: the server's default policy
    summary: Callable[[InputT], str]
    queue: QueueKind = "main"
    # Set where ``retry``'s initial interval is LOST_ATTEMPT_RETRY: the back-off for raised failures.
    failure_backoff: Backoff | None = None
    # Attempts that end with a failure the activity raised (the provider's errors); the last is
    # made final. Set: ``retry`` has no attempt limit and the kind no schedule-to-close, since lost
    # attempts are bounded by the operator's retry window instead. None: ``retry`` counts every attempt.
    provider_attempts: int | None = None
    # What a cancelled run waits for: by default nothing (the call is abandoned to its cancellation).
    cancellation: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL


# The patch that moved each kind off the main queue; runs recorded before it stay there.
QUEUE_PATCHES: dict[QueueKind, str] = {
    "sandbox": "python-sandbox-queue",
    "model": "split-queues",
    "tools": "split-queues",
}


CHAT: ActivityOptions[ChatRequest] = ActivityOptions(
    "chat", start_to_close=timedelta(minutes=5), schedule_to_close=None,
    heartbeat_timeout=QUICK_HEARTBEAT_TIMEOUT,
    # The provider's errors end the run after 6 attempts with its message, instead of retrying for
    # ever; 429s wait as long as the provider asks (Retry-After). Lost attempts: the retry window.
    retry=RetryPolicy(initial_interval=LOST_ATTEMPT_RETRY, backoff_coefficient=2.0,
                      maximum_interval=timedelta(seconds=60),
                      non_retryable_error_types=["ModelProviderError", "PromptError"]),
    summary=lambda request: summary_text(request.prompt), queue="model",
    failure_backoff=Backoff(timedelta(seconds=2), 2.0, timedelta(seconds=60)), provider_attempts=6,
)
WEB_SEARCH: ActivityOptions[SearchRequest] = ActivityOptions(
    "web_search", start_to_close=timedelta(seconds=60), schedule_to_close=None,
    heartbeat_timeout=QUICK_HEARTBEAT_TIMEOUT,
    retry=RetryPolicy(initial_interval=LOST_ATTEMPT_RETRY, maximum_interval=timedelta(seconds=20)),
    summary=lambda request: f"web_search: {summary_text(request.query)}", queue="tools",
    failure_backoff=Backoff(timedelta(seconds=1), 2.0, timedelta(seconds=20)), provider_attempts=4,
)
LOCAL_SEARCH: ActivityOptions[LocalSearchRequest] = ActivityOptions(
    "local_search_tool", start_to_close=timedelta(minutes=10), schedule_to_close=None,
    heartbeat_timeout=HEARTBEAT_TIMEOUT,
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=20)),
    summary=lambda request: f"local_search_tool: {summary_text(request.query)}", queue="tools",
    provider_attempts=4,
)
CRAWL: ActivityOptions[CrawlRequest] = ActivityOptions(
    "crawl_tool", start_to_close=timedelta(seconds=60), schedule_to_close=None,
    heartbeat_timeout=HEARTBEAT_TIMEOUT,
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)),
    summary=lambda request: f"crawl_tool: {url_host(request.url)}", queue="tools", provider_attempts=3,
)
# The sandbox's run and an MCP call may have done their work before their attempt was lost (run
# the code, reached a tool with side effects): they keep a small count of attempts of any cause.
# A run goes on without them: their failure is a tool message to the model.
PYTHON: ActivityOptions[PythonRequest] = ActivityOptions(
    "python_repl_tool", start_to_close=timedelta(seconds=120), schedule_to_close=timedelta(minutes=5),
    heartbeat_timeout=HEARTBEAT_TIMEOUT, retry=RetryPolicy(maximum_attempts=2),
    summary=lambda _request: "python_repl_tool",  # the code itself is too long for a line
    queue="sandbox",
)
MCP_LIST_TOOLS: ActivityOptions[MCPListRequest] = ActivityOptions(
    "mcp_list_tools", start_to_close=timedelta(seconds=90), schedule_to_close=None,
    heartbeat_timeout=HEARTBEAT_TIMEOUT,
    retry=RetryPolicy(non_retryable_error_types=["MCPConfigError"]),
    summary=lambda request: f"mcp tools: {summary_text(request.server_name)} for {summary_text(request.agent)}",
    queue="tools", provider_attempts=3,
)
MCP_CALL_TOOL: ActivityOptions[MCPCallRequest] = ActivityOptions(
    "mcp_call_tool", start_to_close=timedelta(seconds=150), schedule_to_close=None,
    heartbeat_timeout=HEARTBEAT_TIMEOUT,
    # A tool may have side effects: retry only what never reached it, and only twice.
    retry=RetryPolicy(maximum_attempts=2, non_retryable_error_types=["MCPConfigError", "MCPUnknownTool"]),
    summary=lambda request: f"mcp: {summary_text(request.server_name)}.{summary_text(request.tool)}",
    queue="tools",
)
# The content flows' own work (workflows/content/slide_composer.py, workflows/contracts/podcast.py).
RENDER_SLIDES: ActivityOptions[Deck] = ActivityOptions(
    "render_slides", start_to_close=timedelta(seconds=60), schedule_to_close=timedelta(minutes=5),
    heartbeat_timeout=None, retry=RetryPolicy(maximum_attempts=3),
    summary=lambda deck: f"render_slides · {len(deck.slides)} slide(s)", queue="tools",
)
# A line waits on the speech endpoint like a search waits on its provider: one lost with a worker
# whose journal no successor reads (another host, a replaced container) is retried after the
# heartbeat timeout, not its 90 s, and lost attempts do not use up the endpoint's four.
SPEAK: ActivityOptions[SpeechRequest] = ActivityOptions(
    "speak", start_to_close=timedelta(seconds=90), schedule_to_close=None,
    heartbeat_timeout=HEARTBEAT_TIMEOUT,
    retry=RetryPolicy(initial_interval=LOST_ATTEMPT_RETRY, maximum_interval=timedelta(seconds=20),
                      non_retryable_error_types=["NoVoice", "SpeechRefused"]),
    summary=lambda line: f"speak · {line.speaker} · {summary_text(line.text)}", queue="tools",
    failure_backoff=Backoff(timedelta(seconds=1), 2.0, timedelta(seconds=20)), provider_attempts=4,
)
JOIN_AUDIO: ActivityOptions[list[ArtefactRef]] = ActivityOptions(
    "join_audio", start_to_close=timedelta(seconds=60), schedule_to_close=timedelta(minutes=5),
    heartbeat_timeout=None, retry=RetryPolicy(maximum_attempts=3),
    summary=lambda clips: f"join_audio · {len(clips)} clip(s)", queue="tools",
)
# A report's metrics: CPU work on text a request sent, kept out of workflow code (issue #42).
MEASURE_REPORT: ActivityOptions[MeasureRequest] = ActivityOptions(
    "measure_report", start_to_close=timedelta(seconds=60), schedule_to_close=timedelta(minutes=5),
    heartbeat_timeout=None, retry=RetryPolicy(maximum_attempts=3),
    summary=lambda request: f"measure_report · {len(request.report):,} characters", queue="tools",
)
LOAD_RUN_CONFIG: ActivityOptions[list[str]] = ActivityOptions(
    "load_run_config", start_to_close=timedelta(seconds=30), schedule_to_close=None,
    heartbeat_timeout=None, retry=None,  # reads settings and checks paths: nothing to heartbeat
    summary=lambda resources: f"load_run_config · {len(resources)} resource(s)",
)
# A run that ends cancelled by its own decision asks the server for the cancellation, and the call
# waits until the run, ending, cancels it (activities/run_control.py).
CANCEL_ITSELF: ActivityOptions[str] = ActivityOptions(
    "cancel_itself", start_to_close=timedelta(seconds=90), schedule_to_close=timedelta(minutes=5),
    heartbeat_timeout=HEARTBEAT_TIMEOUT, retry=RetryPolicy(maximum_interval=timedelta(seconds=10)),
    summary=lambda reason: f"cancel the run · {summary_text(reason)}",
    cancellation=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
)

# A fork reads its source's state: the source's checkpoint query, answered by a worker replaying the
# source's history (activities/fork_source.py). A source that is gone or never a research run is final.
READ_FORK_SOURCE: ActivityOptions[ForkPoint] = ActivityOptions(
    "read_fork_source", start_to_close=timedelta(minutes=2), schedule_to_close=timedelta(minutes=10),
    heartbeat_timeout=None, retry=RetryPolicy(maximum_interval=timedelta(seconds=10),
                                              non_retryable_error_types=["ForkSourceRefused"]),
    summary=lambda point: f"read fork source · {summary_text(point.workflow_id)} at {point.at}",
)

ACTIVITY_OPTIONS: dict[str, ActivityOptions[Any]] = {
    options.name: options
    for options in (CHAT, WEB_SEARCH, LOCAL_SEARCH, CRAWL, PYTHON, MCP_LIST_TOOLS, MCP_CALL_TOOL, RENDER_SLIDES,
                    SPEAK, JOIN_AUDIO, MEASURE_REPORT, LOAD_RUN_CONFIG, CANCEL_ITSELF, READ_FORK_SOURCE)
}


def task_queue_for(options: ActivityOptions[Any], routing: QueueRouting) -> str | None:
    """The queue this run schedules ``options``' kind on; None: the run's own (main) queue.

    No patch guards ``routing``: it is data in the run's recorded config, empty in runs recorded
    before it, so replay makes the same choice.
    """
    if options.queue == "main" or not workflow.patched(QUEUE_PATCHES[options.queue]):
        return None
    if options.queue in routing.main_queue_kinds:
        return None
    return queue_name(options.queue, workflow.info().task_queue)


async def execute(options: ActivityOptions[InputT], arg: InputT, result_type: type[ResultT], *,
                  routing: QueueRouting, summary: str | None = None) -> ResultT:
    """Run one activity with its kind's options, on the queue ``routing`` picks for its kind;
    ``summary`` replaces the kind's default line.

    A call cancelled with its run raises ``asyncio.CancelledError``, as any other wait of a
    cancelled run does, so no ``except ActivityError`` that forgives a failed call can swallow the
    run's cancellation (``CANCELLED_CALL_PATCH``).
    """
    try:
        return await workflow.execute_activity(
            options.name,
            arg,
            result_type=result_type,
            task_queue=task_queue_for(options, routing),
            start_to_close_timeout=options.start_to_close,
            schedule_to_close_timeout=options.schedule_to_close,
            heartbeat_timeout=options.heartbeat_timeout,
            retry_policy=options.retry,
            cancellation_type=options.cancellation,
            summary=summary if summary is not None else options.summary(arg),
        )
    except ActivityError as error:
        if isinstance(error.cause, CancelledError) and workflow.patched(CANCELLED_CALL_PATCH):
            raise asyncio.CancelledError(error.cause.message) from error
        raise
