"""``watch``, ``cancel`` (one run) and ``down``: operating runs (and the embedded server) once started."""

from __future__ import annotations

import argparse
import sys

from cli.actor import cli_actor
from cli.command_client import stop_command_server
from cli.render import ended_label
from cli.runs import _describe
from config.settings import Settings
from runtime import research_client
from runtime.embedded import EmbeddedStack
from runtime.front_door import CliError, connect, revive_worker
from workflows.contracts.status import Phase


async def watch_run(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here: rich and the live view are this command's alone (list, cancel and down start without them).
    from cli.watch import WatchStats, watch

    client = await connect(settings)  # the status query needs a worker
    stats = WatchStats()
    final = await watch(client.get_workflow_handle(args.id), live=sys.stdout.isatty() and not args.plain,
                        out=sys.stdout, stats=stats, on_no_worker=lambda: revive_worker(client, settings))
    if args.stats:
        print(stats.summary(), file=sys.stderr)
    return 1 if final.phase is Phase.FAILED else 0


async def cancel(args: argparse.Namespace, settings: Settings) -> int:
    client = await connect(settings, ensure_worker=False)
    handle = client.get_workflow_handle(args.id)
    ended = ended_label((await _describe(handle)).status)
    if ended is not None:
        raise CliError(f"Run {args.id} has already ended ({ended}); there is nothing to cancel.")
    await research_client.cancel(handle, cli_actor(args))
    print(f"Cancellation requested for {args.id}")
    return 0


async def down(args: argparse.Namespace, settings: Settings) -> int:
    stopped = EmbeddedStack(settings).stop()
    if stop_command_server():
        stopped.append("command server")
    print(f"Stopped: {', '.join(stopped)}" if stopped else "Nothing to stop.")
    return 0
