"""``starter.py serve`` and ``starter.py codec-server``: our HTTP servers on uvicorn.

``serve`` is the web front end, a Temporal client like the CLI: it connects the way the CLI does
(runtime/front_door.py), so on the plain loopback default it starts the embedded dev server and a
worker (with the offline demonstration model when no key is set), and revives them while it runs
(runtime/embedded_keeper.py). ``codec-server`` needs no
Temporal connection, only the data converter's settings (blob store, encryption keys). Both get
the settings the command line's entry point (cli/main.py) loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

import uvicorn

from config.settings import Settings
from runtime.converter import data_converter
from runtime.embedded_keeper import keep_embedded
from runtime.front_door import CliError, connect
from runtime.health import always_ready, temporal_problem, with_probes
from runtime.logs import configure_logging
from runtime.token_stream_format import PATH as TOKEN_STREAM_PATH
from runtime.token_stream_format import announce
from server.access import holders_said
from server.app import create_app
from server.codec import create_codec_app
from server.live import TokenHub
from server.security import RequestError, check_bind

logger = logging.getLogger(__name__)


async def serve(args: argparse.Namespace, settings: Settings) -> int:
    configure_logging(settings)
    try:
        check_bind(args.host, bool(settings.web_token or settings.web_tokens))
    except RequestError as error:
        raise CliError(str(error)) from error
    client = await connect(settings)
    host = f"[{args.host}]" if ":" in args.host else args.host
    logger.info("Research page: http://%s:%s/   (DeerFlow's UI: API base http://%s:%s/api/)",
                host, args.port, host, args.port)
    logger.info("API holders: %s", holders_said(settings))
    hub = TokenHub(settings)
    app = with_probes(create_app(client, settings, hub=hub), lambda: temporal_problem(client))
    config = uvicorn.Config(app, host=args.host, port=args.port,
                            **uvicorn_logging(settings), timeout_graceful_shutdown=2)
    # Local workers (the embedded default) find where to send token previews here; see token_stream.
    announced = announce(settings.home, f"http://{_local(args.host)}:{args.port}{TOKEN_STREAM_PATH}", hub.token)
    keeper = asyncio.create_task(keep_embedded(client, settings))  # revives a dead worker or dev server
    try:
        await _Withdrawing(config, announced).serve()
    finally:  # a failed start never reaches the server's shutdown
        keeper.cancel()
        announced.unlink(missing_ok=True)
    return 0


class _Withdrawing(uvicorn.Server):
    """A server that withdraws its announcement as it shuts down. On SIGTERM or SIGINT uvicorn shuts
    down and then raises the signal again, which ends the process before ``serve``'s cleanup runs:
    the announcement stayed behind, and local workers then sent their previews to a dead address."""

    def __init__(self, config: uvicorn.Config, announced: Path) -> None:
        super().__init__(config)
        self.announced = announced

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().shutdown(sockets)
        finally:
            self.announced.unlink(missing_ok=True)


async def serve_codec(args: argparse.Namespace, settings: Settings) -> int:
    configure_logging(settings)
    try:
        # The operator's explicit choice (a command-line flag, trusted config): in compose the container
        # must listen on its own network, while the host publishes the port on its loopback alone. The
        # Host check still holds: without a token, only requests addressed to loopback are answered.
        if not args.no_token_on_private_network:
            check_bind(args.host, bool(settings.codec_token), setting="DEERFLOW_CODEC_TOKEN")
    except RequestError as error:
        raise CliError(str(error)) from error
    app = create_codec_app(data_converter(settings), settings)  # a bad key stops it here, before it listens
    host = f"[{args.host}]" if ":" in args.host else args.host
    logger.info("Codec server: http://%s:%s  (temporal workflow show --codec-endpoint http://%s:%s)",
                host, args.port, host, args.port)
    config = uvicorn.Config(with_probes(app, always_ready), host=args.host, port=args.port,
                            **uvicorn_logging(settings), timeout_graceful_shutdown=2)
    await uvicorn.Server(config).serve()
    return 0


def uvicorn_logging(settings: Settings) -> dict[str, Any]:
    """uvicorn's records through our handler (runtime/logs.py), its own set-up off. Access lines only at
    DEBUG: probes and the page's polling would bury everything else."""
    return {"log_config": None, "log_level": settings.log_level.lower(), "access_log": settings.log_level == "DEBUG"}


def _local(host: str) -> str:
    """How a worker on this machine reaches a server bound to ``host`` (a wildcard: by loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
