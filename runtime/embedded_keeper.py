"""Keeps the embedded default up for as long as ``starter.py serve`` runs.

Why: the front door starts the embedded dev server, its codec server and the background worker,
and each CLI command revives whichever died (runtime/front_door.py). A person on the page, or on
DeerFlow's UI, runs no command: a worker killed by the kernel's OOM killer, or a dev server that
crashed, left every run of the page stalled (its run view waiting half a minute for a worker that
never came) until someone typed a command in a shell. So the API server checks every
:data:`KEEP_INTERVAL_SECONDS` and revives them the way a command would; the new worker's reclaim
retries what the dead one was running (hosting/reclaim.py), so the runs go on from their last step.

What it leaves alone: a stack stopped with ``starter.py down`` (until a command starts it again),
a deployment with a configured address (its operator runs its workers), and a worker of the
user's own (``python worker.py``), which only the server's poller list can see; a recorded worker
that still runs is not even asked about, so a check costs a few file reads.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client

from config.settings import Settings
from runtime.connection import load_connection
from runtime.embedded import EmbeddedStack, is_listening

logger = logging.getLogger(__name__)

KEEP_INTERVAL_SECONDS = 2.0
# After a failed revival the next check waits twice as long, up to this: a worker that cannot start
# (a broken conf.yaml) is not relaunched, and its failure logged, every two seconds.
MAX_BACKOFF_SECONDS = 60.0


async def keep_embedded(client: Client, settings: Settings, interval: float = KEEP_INTERVAL_SECONDS) -> None:
    """Revive the embedded stack's dead parts every ``interval`` seconds, until cancelled (a no-op
    for a configured deployment). A failed revival is logged and tried again later."""
    connection = load_connection(settings)
    if not connection.embedded:
        return
    stack = EmbeddedStack(settings)
    wait = interval
    while True:
        await asyncio.sleep(wait)
        try:
            revived = await revive_dead_parts(stack, client, connection.address)
        except Exception as error:  # a server or worker that cannot start now may start later
            wait = min(wait * 2, MAX_BACKOFF_SECONDS)
            logger.warning("Could not revive the embedded Temporal stack (%s); trying again in %.0f s", error, wait)
            continue
        wait = interval
        if revived:
            logger.warning("Revived the embedded %s (it had stopped); logs in %s",
                           " and ".join(revived), stack.state_dir())


async def revive_dead_parts(stack: EmbeddedStack, client: Client, address: str) -> list[str]:
    """One check: start what is missing of the dev server (with its codec server), the codec
    server and the background worker; returns what was started."""
    if stack.is_down():
        return []
    revived = []
    if not await asyncio.to_thread(is_listening, address):
        await asyncio.to_thread(stack.start_dev_server, address)
        revived.append("Temporal dev server")
    elif stack.revive_codec_server(address):
        revived.append("codec server")
    if stack.recorded_process("worker", address) is None and not stack.is_down() \
            and await stack.ensure_worker(client, address):
        revived.append("worker")
    return revived
