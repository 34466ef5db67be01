"""``starter.py inspect``: what a run did, call by call, from the server or from a history file.

The run is read through the process's data converter (its blob store and encryption keys, as the
workers'), and the operator's secrets are removed from everything shown by the workers' own
scrubber (activities/guards/secret_scrubber.py): a history file from elsewhere, or a question that
quoted a key, must not print one. ``--json`` prints the same ``RunInspection`` as data;
``--html FILE`` writes it as a page that loads nothing (cli/inspection_html.py).
"""

from __future__ import annotations

import argparse
import sys

from temporalio.service import RPCError

from activities.guards.secret_scrubber import SecretScrubber
from cli.history import history_file
from cli.inspection_html import render_html
from cli.inspection_text import PART_LIMIT, render
from cli.runs import _check_output, _describe, _forks, _write_file
from cli.terminal import printable_json
from config.settings import Settings
from runtime.converter import data_converter
from runtime.front_door import CliError, connect
from runtime.inspection_model import ForkLink, RunInspection
from runtime.inspection_source import inspect_histories, inspect_run


async def inspect_command(args: argparse.Namespace, settings: Settings) -> int:
    _check_output(args.html)
    inspection = SecretScrubber.for_settings(settings).scrub_value(await _inspection(args, settings))
    if args.html:
        _write_file(args.html, render_html(inspection))
        print(f"Inspection of {inspection.workflow_id} ({len(inspection.calls)} calls) written to {args.html}",
              file=sys.stderr)
    elif args.json:
        print(printable_json(inspection.model_dump_json(indent=2)))
    else:
        print(render(inspection, limit=None if args.full else PART_LIMIT))
    for problem in inspection.problems if args.html or args.json else ():
        print(f"Warning: {problem}", file=sys.stderr)
    return 0


async def _inspection(args: argparse.Namespace, settings: Settings) -> RunInspection:
    if args.file:
        recorded = history_file(args.file, args.id)
        return await inspect_histories([recorded], data_converter(settings), f"file {args.file}")
    if not args.id:
        raise CliError("inspect needs a run ID or --file FILE.json")
    client = await connect(settings, ensure_worker=False)
    described = await _describe(client.get_workflow_handle(args.id))  # "No research run with ID …" before any work
    try:
        inspection = await inspect_run(client, args.id, f"server {client.service_client.config.target_host}",
                                       described)
    except RPCError as error:
        raise CliError(f"Could not read the history of {args.id}: {error.message}") from error
    inspection.forks = [ForkLink(workflow_id=fork.workflow_id, at=fork.at) for fork in await _forks(client, args.id)]
    return inspection
