"""The worker: serves the task queues of ``workflows/queues.py`` for runs on ``deep-research``.

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

import argparse
import asyncio
import logging
import signal
from datetime import timedelta

from temporalio.client import Client
from temporalio.worker import Interceptor

from activities.inflight_journal import InflightJournal
from activities.isolated import start_fork_server
from activities.journal_interceptor import InflightJournalInterceptor
from activities.lazy import MODEL_MODULE, load, preload
from activities.reclaim import open_journal, reclaim_at_start, settled
from activities.registry import build_workers, running
from activities.scrub_interceptor import SecretScrubbingInterceptor
from activities.secret_scrubber import ScrubbingLogFilter, SecretScrubber
from activities.tool_metrics import ToolMetricsInterceptor
from config.settings import ConfigError, Settings, load_settings
from offline.providers import offline_banner, start_offline_providers, with_overrides
from runtime.connection import TemporalConnectionError, connect, load_connection
from runtime.converter import prepare_payload_store
from runtime.encryption import EncryptionConfigError
from runtime.metrics import metrics_runtime
from runtime.search_attributes import ensure_search_attributes
from runtime.shutdown import exit_now
from sandbox.activity import SandboxActivities
from workflows.queues import QUEUE_KINDS, QueueKind

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


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The deerflow-temporal worker.")
    parser.add_argument("--queues", type=parse_queues, default=QUEUE_KINDS, metavar="KINDS",
                        help="comma-separated: main (the workflow), model, tools, sandbox (the coder's Python), "
                             "or the presets all (default) and keyed (main,model,tools)")
    queues: tuple[QueueKind, ...] = parser.parse_args(argv).queues
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Settings are built once, here, and handed to everything that needs them; the offline
    # providers add the settings that point at them instead of rewriting the environment.
    # The offline decision is made from the loaded settings, so a model configured only in
    # conf.yaml or .env counts.
    configured = load_settings()
    providers = start_offline_providers(configured)
    settings = with_overrides(configured, providers.overrides)
    scrubber = SecretScrubber.for_settings(settings)
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubbingLogFilter(scrubber))
    banner = offline_banner(configured)
    if banner is not None:
        logging.warning(banner)
    connection = load_connection()
    await prepare_payload_store(settings)
    # With DEERFLOW_METRICS_ADDRESS the runtime serves /metrics; with OTEL_EXPORTER_OTLP_ENDPOINT the
    # client carries the tracing interceptor, and so do the workers built on it.
    runtime = metrics_runtime(settings)
    client = await connect(connection, settings, runtime=runtime)
    # Runs upsert the custom search attributes only where they exist (see runtime/search_attributes.py);
    # load_run_config hands each run this answer, recording it in history for replay.
    search_attributes_enabled = await ensure_search_attributes(client)
    # Each attempt's task token is journalled while it runs, so a successor of this process can
    # fail what it lost at once (activities/reclaim.py); outermost, so an attempt's end is its last.
    journal = open_journal(settings, client)
    interceptors: list[Interceptor] = [] if journal is None else [InflightJournalInterceptor(journal)]
    # Every activity's output and failures are scrubbed of the worker's secrets before they leave it.
    interceptors.append(SecretScrubbingInterceptor(scrubber))
    if runtime is not None:
        interceptors.append(ToolMetricsInterceptor(settings))
        logging.info("Serving Prometheus metrics at http://%s/metrics", settings.metrics_address)
    sandbox = SandboxActivities(settings)
    workers = build_workers(client, settings, queues, search_attributes_enabled=search_attributes_enabled,
                            sandbox=sandbox, interceptors=interceptors,
                            sticky_queue_schedule_to_start_timeout=STICKY_QUEUE_TIMEOUT)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    polled = [worker.task_queue for worker in workers]
    logging.info("Worker polling %s on %s (namespace %s)", polled, connection.address, connection.namespace)
    try:
        # A warm-up that fails stops the worker, as a failure at start would.
        async with running(workers), asyncio.TaskGroup() as group:
            group.create_task(warm_up(queues, settings, sandbox, client, journal))
            await stop.wait()
    finally:
        if journal is not None:
            journal.close()
        providers.stop()


async def warm_up(queues: tuple[QueueKind, ...], settings: Settings, sandbox: SandboxActivities, client: Client,
                  journal: InflightJournal | None) -> None:
    """Start-up work that waits until the workers poll, so that a worker replacing a dead one
    resumes its runs first (the front door and a crashed run wait for that first poll).

    Reclaiming a dead predecessor's attempts (so they are retried now) goes first: the imports below
    would hold up its few calls. The attempts it failed are retried at once, mostly here: a model
    call waits for the model libraries, which are imported first, and the rest (seconds of CPU: the
    MCP SDK, the fork server) waits until those retries are done (at most 10 s), measured to take
    0.6-1 s off the resume of a run killed mid-model-call (bench/crash_cost.py).

    Each is also done on first use, which would otherwise pay for it: the sandbox is probed by the first
    python_repl_tool call, the fork server (1-3 s) is started by the first extraction, and the model and
    MCP libraries (seconds) are imported by the first call that needs them.
    """
    reclaimed = 0 if journal is None else await reclaim_at_start(client, journal)
    if "sandbox" in queues:
        await sandbox.self_check()  # says whether the code is contained, or refused
    if {"main", "model", "tools"} & set(queues):  # the fork server imports in its own process: they overlap
        if reclaimed and journal is not None:
            await load(MODEL_MODULE)
            await settled(journal)
        await asyncio.gather(asyncio.to_thread(start_fork_server, settings), preload())


if __name__ == "__main__":
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
