"""What each task queue's worker registers, bound to the objects that hold their settings.

The worker, the tests, the history recorder and the benchmarks all build their workers with
:func:`build_workers`, so a new activity or queue is registered in one place. The main queue
keeps every activity for runs recorded before their kind had a queue of its own
(workflows/calls/queues.py): on a worker that cannot contain the code, python_repl_tool refuses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.worker import Interceptor, Worker

from activities.content.evaluation import measure_report
from activities.content.slides import SlideActivities
from activities.content.speech import SpeechActivities
from activities.documents.retrieval import RetrievalActivities
from activities.fork_source import read_fork_source
from activities.mcp.calls import McpActivities
from activities.model.chat import ChatActivity
from activities.run_config import RunConfigActivities
from activities.run_control import cancel_itself
from activities.web.crawl import CrawlActivities
from activities.web.search import SearchActivities
from config.settings import Settings
from hosting.retry_window import RetryWindowInterceptor
from runtime.message_payloads import worker_client
from runtime.workflow_runner import workflow_runner
from sandbox.activity import SandboxActivities
from workflows.calls.activity_options import HEARTBEAT_THROTTLE
from workflows.calls.queues import QUEUE_KINDS, QueueKind, queue_name
from workflows.catalog import WORKFLOWS
from workflows.contracts.research import TASK_QUEUE

log = logging.getLogger(__name__)


def queue_activities(
    settings: Settings, *, search_attributes_enabled: bool = False, sandbox: SandboxActivities | None = None,
    chat: ChatActivity | None = None, served: Collection[QueueKind] = QUEUE_KINDS,
) -> dict[QueueKind, list[Callable[..., Any]]]:
    """Each queue's activities. ``sandbox``: the worker's one sandbox (probed once), if it has one;
    ``chat``: its model turn (warmed at start), if it has one; ``served``: the queues this worker
    serves (the run config tells runs which it runs beside them)."""
    sandbox = sandbox or SandboxActivities(settings)
    mcp = McpActivities(settings)
    speech = SpeechActivities(settings)
    model = [(chat or ChatActivity(settings)).chat]
    tools = [SearchActivities(settings).web_search, CrawlActivities(settings).crawl_tool,
             RetrievalActivities(settings).local_search_tool, mcp.mcp_list_tools, mcp.mcp_call_tool,
             SlideActivities(settings).render_slides,
             speech.speak, speech.join_audio, measure_report]
    python = [sandbox.python_repl_tool]
    own_run = [RunConfigActivities(settings, search_attributes_enabled, served).load_run_config, cancel_itself,
               read_fork_source]
    return {"main": [*model, *tools, *python, *own_run], "model": model, "tools": tools, "sandbox": python}


def queue_concurrency(settings: Settings, kind: QueueKind) -> int:
    """How many activities of ``kind``'s queue one worker runs at once."""
    return {
        "main": settings.main_queue_concurrency,
        "model": settings.model_queue_concurrency or settings.llm_max_concurrency,
        "tools": settings.tools_queue_concurrency,
        "sandbox": settings.sandbox_queue_concurrency,
    }[kind]


def build_workers(
    client: Client, settings: Settings, kinds: Collection[QueueKind] = QUEUE_KINDS, *,
    main_queue: str = TASK_QUEUE, search_attributes_enabled: bool = False, sandbox: SandboxActivities | None = None,
    chat: ChatActivity | None = None, interceptors: Sequence[Interceptor] = (),
    activities: dict[QueueKind, list[Callable[..., Any]]] | None = None,
    **worker_options: Any,
) -> list[Worker]:
    """One worker per queue kind in ``kinds``, each with its own concurrency limit.

    The main queue's worker also runs the workflow. ``activities``: built by the caller with
    :func:`queue_activities` when it replaces one (tests/test_worker_retries.py stalls the chat).
    ``worker_options`` go to every worker; the sandbox's worker gets no workflow and no keyed activity.
    Every worker ends the retries of lost attempts after the operator's window (after ``interceptors``).
    """
    if activities is None:
        activities = queue_activities(settings, search_attributes_enabled=search_attributes_enabled, sandbox=sandbox,
                                      chat=chat, served=kinds)
    interceptors = [*interceptors, RetryWindowInterceptor(settings.worker_retry_window)]
    client = worker_client(client)  # a broken message is refused, not a failed workflow task
    workers = []
    for kind in QUEUE_KINDS:
        if kind not in kinds:
            continue
        options: dict[str, Any] = {"max_cached_workflows": settings.max_cached_workflows,
                                   "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE, **worker_options}
        if kind == "main":
            options["workflows"] = list(WORKFLOWS)
            options.setdefault("workflow_runner", workflow_runner())
        if kind == "model" and settings.llm_requests_per_second is not None:
            # The server's cap, for every worker polling the queue: the last poller's value is the queue's.
            options["max_task_queue_activities_per_second"] = settings.llm_requests_per_second
        workers.append(Worker(client, task_queue=queue_name(kind, main_queue), activities=activities[kind],
                              interceptors=interceptors, max_concurrent_activities=queue_concurrency(settings, kind),
                              **options))
    return workers


class _SdkShutdownLine(logging.Filter):
    """Drops the SDK's "Beginning worker shutdown, will wait ..." record: it comes once per queue's
    worker (four identical lines for one process), and the stop signal's own line said it already."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Beginning worker shutdown")


@contextlib.contextmanager
def _one_shutdown_line() -> Iterator[None]:
    sdk = logging.getLogger("temporalio.worker._worker")
    quiet = _SdkShutdownLine()
    sdk.addFilter(quiet)
    try:
        yield
    finally:
        sdk.removeFilter(quiet)


@contextlib.asynccontextmanager
async def running(workers: Sequence[Worker], *, held: Collection[Worker] = (),
                  until: Callable[[], Awaitable[object]] | None = None) -> AsyncIterator[None]:
    """Run ``workers`` together; leaving the block shuts them down gracefully, all at once.

    At once: each worker polls no more from the start of its shutdown, but waits for its activities
    in flight (up to its ``graceful_shutdown_timeout``). Shut down one after another, the others
    would keep taking new tasks meanwhile, the main queue's worker new workflow tasks included.

    ``held``: those of ``workers`` that start polling only once ``until`` has returned (worker.py
    holds the model queue's until the model libraries are imported, under a request quota).
    """
    started: list[Worker] = []
    async with contextlib.AsyncExitStack() as stack:

        async def start(batch: Sequence[Worker]) -> None:
            for worker in batch:
                await stack.enter_async_context(worker)
                started.append(worker)

        async def start_held() -> None:
            if until is not None:
                await until()
            await start([worker for worker in workers if worker in held])

        await start([worker for worker in workers if worker not in held])
        later = asyncio.create_task(start_held()) if held else None
        try:
            yield
        finally:
            if later is not None:
                later.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await later
            with _one_shutdown_line():
                await asyncio.gather(*(worker.shutdown() for worker in started))
            log.info("Worker stopped: %s polled no more, and their attempts in flight ended",
                     ", ".join(worker.task_queue for worker in started) or "no queue")
