"""The worker: runs DeepResearchWorkflow and every activity on task queue ``deep-research``,
and the coder's Python on ``deep-research-sandbox`` (workflows/queues.py).

``--queues main`` or ``--queues sandbox`` serves one of them (docker-compose runs them as two
services: the keys in one, the sandbox's privileges in the other); the default serves both.
With no OPENAI_API_KEY it serves the bundled offline demonstration providers itself. It connects
as ``runtime.connection`` resolves Temporal's environment configuration (address, namespace, TLS,
API key, profile), like every other client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal

from temporalio.worker import Worker

from activities.isolated import start_fork_server
from activities.registry import activities_for, sandbox_activities_for
from activities.scrub_interceptor import SecretScrubbingInterceptor
from activities.secret_scrubber import ScrubbingLogFilter, SecretScrubber
from config.settings import load_settings
from offline.providers import OFFLINE_BANNER, start_offline_providers
from runtime.connection import TemporalConnectionError, connect, load_connection
from runtime.converter import prepare_payload_store
from runtime.search_attributes import ensure_search_attributes
from runtime.shutdown import exit_now
from sandbox.activity import SandboxActivities
from workflows.models import TASK_QUEUE
from workflows.prompt_enhancer import PromptEnhancerWorkflow
from workflows.queues import sandbox_queue
from workflows.research import DeepResearchWorkflow

QUEUE_CHOICES = {"all": ("main", "sandbox"), "main": ("main",), "sandbox": ("sandbox",)}


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The deerflow-temporal worker.")
    parser.add_argument("--queues", choices=QUEUE_CHOICES, default="all",
                        help="main: the workflow and the keyed activities; sandbox: the coder's Python")
    queues = QUEUE_CHOICES[parser.parse_args(argv).queues]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Settings are built once, here, and handed to everything that needs them; the offline
    # providers add the settings that point at them instead of rewriting the environment.
    providers = start_offline_providers()
    settings = load_settings({**os.environ, **providers.overrides})
    scrubber = SecretScrubber.for_settings(settings)
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubbingLogFilter(scrubber))
    if settings.offline_demo:
        logging.warning(OFFLINE_BANNER)
    connection = load_connection()
    await prepare_payload_store(settings)
    client = await connect(connection, settings)
    # Runs upsert the custom search attributes only where they exist (see runtime/search_attributes.py);
    # load_run_config hands each run this answer, recording it in history for replay.
    search_attributes_enabled = await ensure_search_attributes(client)
    # Every activity's output and failures are scrubbed of the worker's secrets before they leave it.
    interceptors = [SecretScrubbingInterceptor(scrubber)]
    sandbox = SandboxActivities(settings)
    workers = []
    if "main" in queues:
        await asyncio.to_thread(start_fork_server, settings)  # so the first crawl does not pay 1-3 s for it
        activities = activities_for(settings, search_attributes_enabled=search_attributes_enabled, sandbox=sandbox)
        workers.append(Worker(client, task_queue=TASK_QUEUE, workflows=[DeepResearchWorkflow, PromptEnhancerWorkflow],
                              activities=activities,
                              interceptors=interceptors, max_cached_workflows=settings.max_cached_workflows))
    if "sandbox" in queues:
        await sandbox.self_check()  # says at start whether the code is contained, or refused
        workers.append(Worker(client, task_queue=sandbox_queue(TASK_QUEUE), activities=sandbox_activities_for(sandbox),
                              interceptors=interceptors))
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    polled = [worker.task_queue for worker in workers]
    logging.info("Worker polling %s on %s (namespace %s)", polled, connection.address, connection.namespace)
    try:
        async with contextlib.AsyncExitStack() as running:  # leaving it shuts the workers down gracefully
            for worker in workers:
                await running.enter_async_context(worker)
            await stop.wait()
    finally:
        providers.stop()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except TemporalConnectionError as error:
        logging.error("%s", error)
        exit_now(2)
    exit_now(0)
