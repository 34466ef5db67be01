"""Connects a front door (the CLI, the API server) to Temporal, starting the embedded default only
where that is safe.

Both front doors connect the same way and report a problem the user can act on the same way
(``CliError``, printed by starter.py without a traceback), so this lives below both of them:
neither imports the other.

The embedded dev server is started only when no address is configured (no TEMPORAL_ADDRESS, no
profile address, no TLS, no API key) and nothing answers at its own loopback address
(DEERFLOW_EMBEDDED_ADDRESS). A configured address is someone's deployment, maybe through a
port-forward that dropped, which runs its own server and workers: the front door only connects to
it and reports clearly when it cannot, rather than answering with a new, empty server.
"""

from __future__ import annotations

import sys

from temporalio.client import Client

from config.settings import Settings
from offline.providers import offline_banner
from runtime.connection import connect as connect_client
from runtime.connection import load_connection
from runtime.embedded import EmbeddedStack, is_listening

NO_WORKER_ADVICE = ("no worker answers this run's queries. Start one with `python worker.py` "
                    "(same TEMPORAL_* settings)")


class CliError(Exception):
    """An error the user can act on; printed without a traceback.

    ``exit_code`` is 2 (a usage or connection problem) unless the error reports how a run ended:
    then it is ``run``'s code for that ending, so a script reads the same code from ``run`` and
    ``report``.
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


async def connect(settings: Settings, *, ensure_worker: bool = True) -> Client:
    """Connect as envconfig says, with the entry point's ``settings``; for the embedded default,
    start the dev server and a worker if missing.

    A dev server started here gets its worker at once, before it answers: the worker's imports and
    its connection overlap the server's start (it connects once the server answers). The codec
    server comes last, once the command has what it waits for: the Web UI needs it only when opened.
    """
    connection = load_connection(settings)
    embedded = connection.embedded
    stack = EmbeddedStack(settings)
    spawned = None
    if embedded and not is_listening(connection.address):
        print(f"No Temporal server at {connection.address}: starting the embedded dev server…", file=sys.stderr)
        ui_url = stack.spawn_dev_server(connection.address)
        spawned = stack.spawn_worker(connection.address) if ensure_worker else None
        stack.wait_for_dev_server(connection.address)
        print(f"Temporal Web UI: {ui_url}", file=sys.stderr)
    # Only a server we may have just started is worth waiting for; anything else answers or fails now.
    client = await connect_client(connection, settings, timeout=30.0 if embedded else 0.0)
    if ensure_worker:
        await revive_worker(client, settings, spawned=spawned)
    if embedded:
        stack.revive_codec_server(connection.address)  # the Web UI reads payloads through it
    return client


async def revive_worker(client: Client, settings: Settings, *, spawned: int | None = None) -> None:
    """For the embedded server, start a background worker if ours is not running (e.g. it was killed),
    or wait for the one ``spawned`` beside a new dev server.

    A no-op for any other deployment: its operator runs its workers.
    """
    connection = load_connection(settings)
    if connection.embedded:
        stack = EmbeddedStack(settings)
        await stack.ensure_worker(client, connection.address, announce=lambda: _announce_worker(stack),
                                  spawned=spawned)


def _announce_worker(stack: EmbeddedStack) -> None:
    banner = offline_banner(stack.settings)  # the worker loads the same settings (EmbeddedStack.child_env)
    if banner is not None:
        print(banner, file=sys.stderr)
    print(f"Starting a background worker (logs in {stack.state_dir() / 'worker.log'})…", file=sys.stderr)
