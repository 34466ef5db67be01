"""``fork``: a new run from a run's plan, one of its steps or its report, reusing what the run found
before that point (nothing before it is paid again), in another style or locale, with an edit."""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid

from pydantic import ValidationError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from cli.actor import cli_actor
from cli.main import RunInterrupted
from cli.research import follow_to_report, warn_of_locale
from cli.runs import _check_output
from cli.terminal import printable
from config.settings import Settings
from runtime import research_client
from runtime.forks import ForkError, fork_id, fork_request
from runtime.front_door import CliError, connect
from workflows.contracts.fork_point import ForkPoint, ForkStage
from workflows.contracts.report_style import ReportStyle

USAGE = "--from is plan, step N or report"


def fork_point(source: str, stage: list[str], edit: str | None) -> ForkPoint:
    """``--from plan``, ``--from step 2`` or ``--from report``, and the edit, as a point of ``source``."""
    words = [word.lower() for word in stage]
    if words in (["plan"], ["report"]):
        return _point(source, ForkStage(words[0]), None, edit)
    if len(words) == 2 and words[0] == "step" and words[1].isdigit():
        return _point(source, ForkStage.STEP, int(words[1]), edit)
    raise CliError(f"{USAGE}, not {' '.join(stage)!r}")


def _point(source: str, stage: ForkStage, step: int | None, edit: str | None) -> ForkPoint:
    try:
        return ForkPoint(workflow_id=source, stage=stage, step=step, edit=edit)
    except ValidationError as error:  # a step out of 1-20, a blank or too long edit
        problem = error.errors()[0]
        raise CliError(f"Cannot fork {source}: {'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None


async def fork(args: argparse.Namespace, settings: Settings) -> int:
    point = fork_point(args.id, args.stage, args.edit)
    warn_of_locale(args.locale)
    _check_output(args.output)
    client = await connect(settings)
    source = client.get_workflow_handle(args.id)
    style = ReportStyle(args.report_style) if args.report_style else None
    try:
        request = await fork_request(client, source, point, report_style=style, locale=args.locale)
    except ForkError as error:
        raise CliError(printable(str(error))) from None
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"No research run with ID {args.id!r}.") from None
        raise CliError(f"Could not read run {args.id}: {error.message}") from None
    run_id = args.fork_id or fork_id(args.id, uuid.uuid4().hex[:6])
    try:
        handle = await research_client.start(client, request, run_id=run_id, started_by=cli_actor(args),
                                             id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                                             summary=f"Fork of {args.id} at {point.at}: {request.question[:150]}")
    except WorkflowAlreadyStartedError:
        raise CliError(f"A run with ID {run_id!r} exists already: choose another --fork-id.") from None
    print(f"Started run {run_id}, a fork of {args.id} at {point.label}", file=sys.stderr)
    interactive = sys.stdin.isatty() and not request.auto_accept_plan
    try:
        return await follow_to_report(handle, args, settings, interactive=interactive)
    except asyncio.CancelledError:
        raise RunInterrupted(run_id) from None
