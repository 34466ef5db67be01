"""Connects the front door to Temporal, starting the embedded default when nothing answers."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

from temporalio.client import Client

from cli.embedded import DEFAULT_ADDRESS, has_worker, is_listening, start_dev_server, start_worker
from offline.providers import OFFLINE_BANNER
from storage.converter import data_converter


class CliError(Exception):
    """An error the user can act on; printed without a traceback."""


async def connect_when_ready(address: str, timeout: float = 30.0, **kwargs: Any) -> Client:
    """``Client.connect``, retried while a just-started server says its frontend is not healthy yet.

    ``temporal server start-dev`` opens its port before the frontend is ready; on a loaded machine
    the first connect then fails. Retrying for a while turns that race into a short wait.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await Client.connect(address, **kwargs)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


def _is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0]
    return host in ("localhost", "::1", "[::1]") or host.startswith("127.")


async def connect(*, ensure_worker: bool = True) -> Client:
    """Connect to ``TEMPORAL_ADDRESS``; on loopback, start the dev server and a worker if missing.

    A remote address is never started or given a worker: that deployment runs its own.
    """
    address = os.environ.get("TEMPORAL_ADDRESS", DEFAULT_ADDRESS)
    namespace = os.environ.get("TEMPORAL_NAMESPACE", "default")
    embedded = _is_loopback(address)
    if not is_listening(address):
        if not embedded:
            raise CliError(f"No Temporal server answers at {address} (TEMPORAL_ADDRESS).")
        print(f"No Temporal server at {address}: starting the embedded dev server…", file=sys.stderr)
        ui_url = start_dev_server(address)
        print(f"Temporal Web UI: {ui_url}", file=sys.stderr)
    try:
        client = await connect_when_ready(address, namespace=namespace, data_converter=data_converter())
    except RuntimeError as error:
        raise CliError(f"Cannot connect to Temporal at {address}: {error}") from error
    if ensure_worker and embedded and not await has_worker(client):
        if not os.environ.get("OPENAI_API_KEY"):
            print(OFFLINE_BANNER, file=sys.stderr)
        print("Starting a background worker (logs in .deerflow/worker.log)…", file=sys.stderr)
        await start_worker(client, address)
    return client
