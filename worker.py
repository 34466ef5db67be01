"""The worker: runs DeepResearchWorkflow and every activity on task queue ``deep-research``.

With no OPENAI_API_KEY it serves the bundled offline demonstration providers itself.
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
from cli.connection import connect_when_ready
from cli.search_attributes import ensure_search_attributes
from cli.shutdown import exit_now
from offline.providers import OFFLINE_BANNER, start_offline_providers
from storage.converter import data_converter, prepare_payload_store
from workflows.models import TASK_QUEUE
from workflows.research import DeepResearchWorkflow

DEFAULT_ADDRESS = "127.0.0.1:7233"


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubbingLogFilter())
    providers = start_offline_providers()
    get_settings.cache_clear()
    if get_settings().offline_demo:
        logging.warning(OFFLINE_BANNER)
    address = os.environ.get("TEMPORAL_ADDRESS", DEFAULT_ADDRESS)
    namespace = os.environ.get("TEMPORAL_NAMESPACE", "default")
    await prepare_payload_store()
    client = await connect_when_ready(address, namespace=namespace, data_converter=data_converter())
    # Runs upsert the custom search attributes only where they exist (see cli/search_attributes.py);
    # load_run_config hands each run this answer, recording it in history for replay.
    os.environ["DEERFLOW_SEARCH_ATTRIBUTES"] = "1" if await ensure_search_attributes(client) else "0"
    get_settings.cache_clear()
    worker = Worker(client, task_queue=TASK_QUEUE, workflows=[DeepResearchWorkflow], activities=ACTIVITIES,
                    interceptors=[SecretScrubbingInterceptor()],
                    max_cached_workflows=get_settings().max_cached_workflows)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    logging.info("Worker polling %r on %s (namespace %s)", TASK_QUEUE, address, namespace)
    try:
        async with worker:  # leaving the block shuts the worker down gracefully
            await stop.wait()
    finally:
        providers.stop()


if __name__ == "__main__":
    asyncio.run(main())
    exit_now(0)
