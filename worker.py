"""The worker: serves the task queues of ``workflows/calls/queues.py`` for runs on ``deep-research``.

``main`` (the workflow), ``model`` (chat), ``tools`` (search, crawl, retrieval, MCP) and
``sandbox`` (the coder's Python). The default serves all four, so one process runs everything;
``--queues`` serves a subset, so operators scale and isolate each kind (docker-compose runs
``keyed``, i.e. main,model,tools, in one service with the keys, and ``sandbox`` in another with the
sandbox's privileges and no key).
With no model configured (env, .env or conf.yaml) it serves the bundled offline demonstration
providers itself. It connects as ``runtime.connection`` resolves Temporal's environment
configuration (address, namespace, TLS, API key, profile), like every other client.
"""

from __future__ import annotations

import gc
import sys

from runtime.deferred_init import DeferredInitFinder
from runtime.process_start import skip_pydantic_plugin_discovery

# Optional extras that two libraries import only because other packages happen to install what they
# need, and that no worker uses: httpx's command line (rich, click and pygments, which our CLI and
# others install) and the openai SDK's aiohttp client (aiohttp comes with aiobotocore, the S3 blob
# store's). Each library falls back on the ImportError that a None entry raises, as when the extra
# is not installed. 0.07 and 0.17 s of a worker's start (issue #45).
OPTIONAL_EXTRAS_NOT_USED = ("httpx._main", "openai._vendor.httpx_aiohttp")

if __name__ == "__main__":
    # No garbage collection while the process imports (1,200 modules: the collector ran about 500
    # times over the growing heap, 0.4 s of the start's 3 s of CPU); warm_up resumes it.
    gc.disable()
    skip_pydantic_plugin_discovery()  # before the first model builds its validator (runtime/process_start.py)
    for extra in OPTIONAL_EXTRAS_NOT_USED:
        sys.modules.setdefault(extra, None)  # type: ignore[arg-type]
    sys.meta_path.insert(0, DeferredInitFinder())  # API schemas, until asked for (runtime/deferred_init.py)

import argparse
import asyncio
import logging
import signal
from datetime import timedelta
from typing import NoReturn

from temporalio.client import Client
from temporalio.worker import Interceptor

from activities.guards.secret_scrubber import ScrubbingLogFilter, SecretScrubber
from activities.model.chat import ChatActivity
from activities.support.isolated import start_fork_server
from activities.support.lazy import MODEL_KINDS, MODEL_MODULE, load, preload
from activities.support.tool_metrics import ToolMetricsInterceptor
from config.settings import ConfigError, Settings, load_settings
from hosting.inflight_journal import InflightJournal
from hosting.journal_interceptor import InflightJournalInterceptor
from hosting.reclaim import hand_back, open_journal, reclaim_at_start, settled
from hosting.registry import build_workers, running
from hosting.scrub_interceptor import SecretScrubbingInterceptor
from offline.providers import OfflineProviders, offline_banner, start_offline_providers, with_overrides
from runtime.build_info import (
    add_version_argument,
    build_id,
    build_label,
    code_digest,
    metric_labels,
    worker_identity,
)
from runtime.connection import TemporalConnectionError, connect, load_connection
from runtime.converter import prepare_payload_store
from runtime.encryption import EncryptionConfigError, keys_summary
from runtime.health import probe_server, worker_readiness
from runtime.logs import TEXT_FORMAT, configure_logging
from runtime.metrics import metrics_runtime
from runtime.search_attributes import ensure_search_attributes
from runtime.shutdown import exit_now
from runtime.stall_watchdog import exit_if_stalled
from sandbox.activity import SandboxActivities
from workflows.calls.queues import QUEUE_KINDS, QueueKind, queue_name

QUEUE_PRESETS: dict[str, tuple[QueueKind, ...]] = {"all": QUEUE_KINDS, "keyed": ("main", "model", "tools")}


def parse_queues(value: str) -> tuple[QueueKind, ...]:
    """``--queues``: comma-separated kinds or presets, e.g. ``sandbox``, ``model,tools``, ``keyed``."""
    kinds: list[QueueKind] = []
    for name in (part.strip() for part in value.split(",")):
        chosen = QUEUE_PRESETS.get(name) or next(((kind,) for kind in QUEUE_KINDS if kind == name), None)
        if chosen is None:
            known = ", ".join([*QUEUE_PRESETS, *QUEUE_KINDS])
            raise argparse.ArgumentTypeError(f"unknown queue {name!r}; choose from {known}")
        kinds.extend(kind for kind in chosen if kind not in kinds)
    return tuple(kinds)

# How long a workflow task offered to this worker's sticky queue waits there before the server moves
# it to the shared queue. The SDK's 10 s is the whole delay before a replacement worker can resume a
# run whose worker died (and answer its status query); a live worker picks its tasks up in
# milliseconds, so 2 s still keeps its cached runs on it.
STICKY_QUEUE_TIMEOUT = timedelta(seconds=2)
# The queues whose activities extract pages and documents in the fork server's children (crawl_tool and
# local_search_tool): a worker serving none of them (model calls only, or the sandbox) never starts it,
# and keeps its 1-3 s of CPU and its process.
EXTRACTING_KINDS: frozenset[QueueKind] = frozenset({"main", "tools"})
# How long a worker stopped at once (a second signal) spends handing its attempts in flight back.
HAND_BACK_SECONDS = 5.0


def parse_args(argv: list[str] | None) -> tuple[QueueKind, ...]:
    """The queues to serve, from the command line (``--version`` prints the build and exits)."""
    parser = argparse.ArgumentParser(description="The deerflow-temporal worker.")
    parser.add_argument("--queues", type=parse_queues, default=QUEUE_KINDS, metavar="KINDS",
                        help="comma-separated: main (the workflow), model, tools, sandbox (the coder's Python), "
                             "or the presets all (default) and keyed (main,model,tools)")
    add_version_argument(parser)
    queues: tuple[QueueKind, ...] = parser.parse_args(argv).queues
    return queues


def load_worker_settings() -> tuple[Settings, OfflineProviders, SecretScrubber]:
    """The worker's settings, the offline providers it serves, and the scrubber of its secrets.

    Settings are built once, here, and handed to everything that needs them; the offline
    providers add the settings that point at them instead of rewriting the environment.
    """
    # Until the settings say otherwise (and for their own problems), records go out as text.
    logging.basicConfig(level=logging.INFO, format=TEXT_FORMAT)
    # The offline decision is made from the loaded settings, so a model configured only in
    # conf.yaml or .env counts.
    configured = load_settings()
    providers = start_offline_providers(configured)
    settings = with_overrides(configured, providers.overrides)
    configure_logging(settings)
    scrubber = SecretScrubber.for_settings(settings)
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubbingLogFilter(scrubber))
    banner = offline_banner(configured)
    if banner is not None:
        logging.warning(banner)
    return settings, providers, scrubber


def activity_interceptors(settings: Settings, scrubber: SecretScrubber, journal: InflightJournal | None,
                          metrics: bool) -> list[Interceptor]:
    """The interceptors around every activity attempt, outermost first."""
    # Each attempt's task token is journalled while it runs, so a successor of this process can
    # fail what it lost at once (hosting/reclaim.py); outermost, so an attempt's end is its last.
    interceptors: list[Interceptor] = [] if journal is None else [InflightJournalInterceptor(journal)]
    # Every activity's output and failures are scrubbed of the worker's secrets before they leave it.
    interceptors.append(SecretScrubbingInterceptor(scrubber))
    if metrics:
        interceptors.append(ToolMetricsInterceptor(settings))
        logging.info("Serving Prometheus metrics at http://%s/metrics", settings.metrics_address)
    return interceptors


async def main(argv: list[str] | None = None) -> None:
    """Serve the chosen queues until a stop signal (see :func:`on_stop_signals`)."""
    queues = parse_args(argv)
    settings, providers, scrubber = load_worker_settings()
    # A loop stuck for the stall ends the process (its traceback in the log) for its supervisor to replace.
    watchdog = asyncio.create_task(exit_if_stalled(settings.worker_stall_seconds))
    connection = load_connection(settings)
    await prepare_payload_store(settings)
    # With DEERFLOW_METRICS_ADDRESS the runtime serves /metrics; with OTEL_EXPORTER_OTLP_ENDPOINT the
    # client carries the tracing interceptor, and so do the workers built on it.
    # Which build this is, on every poll (history records it per workflow task and activity attempt)
    # and every metric series.
    digest = code_digest()
    logging.info("%s", build_label(digest))
    runtime = metrics_runtime(settings, metric_labels(digest))
    client = await connect(connection, settings, runtime=runtime, front_door=False)
    # Runs upsert the custom search attributes only where they exist (see runtime/search_attributes.py);
    # load_run_config hands each run this answer, recording it in history for replay.
    search_attributes_enabled = await ensure_search_attributes(client)
    journal = open_journal(settings, client)
    interceptors = activity_interceptors(settings, scrubber, journal, metrics=runtime is not None)
    sandbox = SandboxActivities(settings)
    chat = ChatActivity(settings)
    grace = timedelta(seconds=settings.worker_shutdown_grace)
    identity = worker_identity(digest)
    workers = build_workers(client, settings, queues, search_attributes_enabled=search_attributes_enabled,
                            sandbox=sandbox, chat=chat, interceptors=interceptors,
                            sticky_queue_schedule_to_start_timeout=STICKY_QUEUE_TIMEOUT,
                            graceful_shutdown_timeout=grace, identity=identity, build_id=build_id(digest))
    stop = asyncio.Event()
    on_stop_signals(stop, grace, client, journal)
    polled = [worker.task_queue for worker in workers]
    # Ready (DEERFLOW_HEALTH_ADDRESS's /readyz) once Temporal lists this worker on each of them.
    served = [(queue, queue == queue_name("main")) for queue in polled]
    logging.info("Worker polling %s on %s (namespace %s)", polled, connection.address, connection.namespace)
    logging.info("%s", keys_summary(settings))
    # Under a request quota the model queue is polled once the model libraries are imported: the
    # server starts its calls at the quota's rate, and calls started while the import ran (seconds,
    # 13 on a busy machine) would wait in this process and reach the provider in one clump.
    held = [worker for worker in workers if worker.task_queue == queue_name("model")
            and settings.llm_requests_per_second is not None]
    try:
        # A warm-up that fails stops the worker, as a failure at start would; a stop does not wait for it.
        async with probe_server(settings.health_address, worker_readiness(client, identity, served)), \
                running(workers, held=held, until=lambda: load(MODEL_MODULE)), asyncio.TaskGroup() as group:
            warming = group.create_task(warm_up(queues, settings, sandbox, chat, client, journal))
            await stop.wait()
            warming.cancel()
    finally:
        if journal is not None:
            journal.close()
        providers.stop()
        watchdog.cancel()


def on_stop_signals(stop: asyncio.Event, grace: timedelta, client: Client, journal: InflightJournal | None) -> None:
    """SIGTERM or SIGINT: the first sets ``stop``, so the workers poll no more and their attempts in
    flight may finish within ``grace`` (a deploy does not pay for a model call twice; the SDK
    cancels what is left then). The second stops the process at once (:func:`stop_now`)."""
    loop = asyncio.get_running_loop()
    forced: list[asyncio.Task[None]] = []  # a reference, so the task is not collected while it runs

    def handle(signum: signal.Signals) -> None:
        if not stop.is_set():
            in_flight = "" if journal is None else f" ({journal.in_flight} now)"
            logging.info("%s: no new work; the attempts in flight%s have up to %s to finish. Signal again to "
                         "stop at once.", signum.name, in_flight, grace)
            stop.set()
        elif not forced:
            forced.append(loop.create_task(stop_now(client, journal)))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)


async def stop_now(client: Client, journal: InflightJournal | None) -> None:
    """Leave without waiting for the attempts in flight, first failing them as ``WorkerLost`` so the
    server retries them now rather than after their heartbeat timeouts."""
    if journal is None:
        logging.warning("Stopping now: the attempts in flight are retried after their heartbeat timeouts")
    else:
        try:
            async with asyncio.timeout(HAND_BACK_SECONDS):
                outcomes = await hand_back(client, journal)
            logging.warning("Stopping now; attempts in flight handed back to the server: %s", dict(outcomes))
        except TimeoutError:
            logging.warning("Stopping now; handing back the attempts in flight took over %s s: the rest are "
                            "retried after their heartbeat timeouts", HAND_BACK_SECONDS)
    exit_now(1)


async def warm_up(queues: tuple[QueueKind, ...], settings: Settings, sandbox: SandboxActivities, chat: ChatActivity,
                  client: Client, journal: InflightJournal | None) -> None:
    """Start-up work that waits until the workers poll, so that a worker replacing a dead one
    resumes its runs first (the front door and a crashed run wait for that first poll).

    Reclaiming a dead predecessor's attempts (so they are retried now) goes first: the imports below
    would hold up its few calls. The attempts it failed are retried at once, mostly here: a model
    call waits for the model libraries, which are imported first, and the rest waits until those
    retries are done (at most 10 s), measured to take 0.6-1 s off the resume of a run killed
    mid-model-call (bench/crash_cost.py).

    Then what a run's first calls need (the model libraries, the search providers: its coordinator,
    background search and planner), and only after them what its later steps need: the sandbox's
    probe and the extraction fork server (1-3 s of CPU in its own process). Started together, they
    took cores from the model libraries' import while a new user waited for the first plan
    (bench/first_plan.py); a run's first crawl and Python come seconds later.

    Each is also done on first use, which would otherwise pay for it: the sandbox is probed by the first
    python_repl_tool call, the fork server is started by the first extraction, the model and
    MCP libraries (seconds) are imported by the first call that needs them, and each tier's context
    window (``GET /models`` to the provider) is asked by its first turn.
    """
    try:
        reclaimed = 0 if journal is None else await reclaim_at_start(client, journal)
        if {"main", "model", "tools"} & set(queues):
            if reclaimed and journal is not None:
                await load(MODEL_MODULE)
                await settled(journal)
            await preload_and_warm_turns(settings, queues, chat)
        if "sandbox" in queues:
            await sandbox.self_check()  # says whether the code is contained, or refused
        if EXTRACTING_KINDS & set(queues):
            await asyncio.to_thread(start_fork_server, settings)
    finally:
        resume_collection()


async def preload_and_warm_turns(settings: Settings, queues: tuple[QueueKind, ...], chat: ChatActivity) -> None:
    """The preload, then, where this worker runs model turns, their own warm-up (the context windows
    and the kept clients), which needs the preload's imports."""
    await preload(settings, queues)
    if MODEL_KINDS & set(queues):
        await chat.warm()


def resume_collection() -> None:
    """Garbage collection back on (paused at the top of this module when run as a script), with
    what start-up created frozen: the imported modules and the clients live as long as the process,
    and a frozen object is never walked again, so each later full collection (hundreds of
    thousands of objects fewer) costs less, between every two calls of a run too."""
    gc.freeze()
    gc.enable()


def run() -> NoReturn:
    """The ``deerflow-worker`` console script and ``python worker.py``."""
    try:
        asyncio.run(main())
    except ConfigError as error:  # one line per problem, no traceback
        for problem in error.problems:
            logging.error("%s", problem)
        exit_now(2)
    except (TemporalConnectionError, EncryptionConfigError) as error:
        logging.error("%s", error)
        exit_now(2)
    exit_now(0)


if __name__ == "__main__":
    run()
