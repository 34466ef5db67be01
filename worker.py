"""The worker: runs DeepResearchWorkflow and every activity on task queue ``deep-research``.

With no OPENAI_API_KEY it serves the bundled offline demonstration providers itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from activities.registry import ACTIVITIES
from activities.settings import get_settings
from cli.shutdown import exit_now
from offline.providers import OFFLINE_BANNER, start_offline_providers
from workflows.models import TASK_QUEUE
from workflows.research import DeepResearchWorkflow

DEFAULT_ADDRESS = "127.0.0.1:7233"


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    providers = start_offline_providers()
    get_settings.cache_clear()
    if get_settings().offline_demo:
        logging.warning(OFFLINE_BANNER)
    address = os.environ.get("TEMPORAL_ADDRESS", DEFAULT_ADDRESS)
    namespace = os.environ.get("TEMPORAL_NAMESPACE", "default")
    client = await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)
    worker = Worker(client, task_queue=TASK_QUEUE, workflows=[DeepResearchWorkflow], activities=ACTIVITIES)
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
