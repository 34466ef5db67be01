"""The worker: runs DeepResearchWorkflow and every activity on task queue ``deep-research``.

With no OPENAI_API_KEY it serves the bundled offline demonstration providers itself. It connects
as ``runtime.connection`` resolves Temporal's environment configuration (address, namespace, TLS,
API key, profile), like every other client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from temporalio.worker import Worker

from activities.registry import ACTIVITIES
from activities.scrub_interceptor import SecretScrubbingInterceptor
from activities.secret_scrubber import ScrubbingLogFilter
from activities.settings import get_settings
from offline.providers import OFFLINE_BANNER, start_offline_providers
from runtime.connection import TemporalConnectionError, connect, load_connection
from runtime.converter import prepare_payload_store
from runtime.search_attributes import ensure_search_attributes
from runtime.shutdown import exit_now
from workflows.models import TASK_QUEUE
from workflows.research import DeepResearchWorkflow


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubbingLogFilter())
    providers = start_offline_providers()
    get_settings.cache_clear()
    if get_settings().offline_demo:
        logging.warning(OFFLINE_BANNER)
    connection = load_connection()
    await prepare_payload_store()
    client = await connect(connection)
    # Runs upsert the custom search attributes only where they exist (see runtime/search_attributes.py);
    # load_run_config hands each run this answer, recording it in history for replay.
    os.environ["DEERFLOW_SEARCH_ATTRIBUTES"] = "1" if await ensure_search_attributes(client) else "0"
    get_settings.cache_clear()
    worker = Worker(client, task_queue=TASK_QUEUE, workflows=[DeepResearchWorkflow], activities=ACTIVITIES,
                    interceptors=[SecretScrubbingInterceptor()],
                    max_cached_workflows=get_settings().max_cached_workflows)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    logging.info("Worker polling %r on %s (namespace %s)", TASK_QUEUE, connection.address, connection.namespace)
    try:
        async with worker:  # leaving the block shuts the worker down gracefully
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
