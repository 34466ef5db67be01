"""``review`` and ``cancel``, for one run or for every run a filter matches (``review --all-awaiting
--accept``, ``cancel --query …``): the runs found through the server's visibility index, each
decided on its own, in the name of whoever runs the command (runtime/bulk_decisions.py)."""

from __future__ import annotations

import argparse
import sys

from temporalio.client import Client, WorkflowExecution
from temporalio.service import RPCError

from cli.actor import cli_actor
from cli.filters import FLAGS, missing_for, run_filter
from cli.terminal import printable
from config.settings import Settings
from runtime.bulk_decisions import BulkOutcome, accept_plan, cancel_run, decision_id, for_each, matching
from runtime.front_door import CliError, connect
from runtime.run_listing import RunFilter
from workflows.contracts.status import Awaiting

WAIT_SECONDS = 60.0  # for a worker to take each review
EXIT_PENDING = 75  # sysexits' EX_TEMPFAIL: nothing failed, some decisions are sent but not yet confirmed


async def review(args: argparse.Namespace, settings: Settings) -> int:
    if not args.all_awaiting:
        _one_run(args, "--all-awaiting")
        from cli.research import review as review_one

        return await review_one(args, settings)
    if args.id is not None:
        raise CliError("give a run ID or --all-awaiting, not both")
    if args.edit is not None:
        raise CliError("--all-awaiting accepts plans (--accept); edit a plan one run at a time")
    wanted = run_filter(args)
    if wanted.awaiting not in (None, Awaiting.PLAN_FEEDBACK):
        raise CliError("--all-awaiting reviews runs waiting for plan_feedback; --awaiting cannot say otherwise")
    client = await connect(settings)  # an update needs a worker to validate it
    runs = await _matching(client, wanted.model_copy(update={"awaiting": Awaiting.PLAN_FEEDBACK}))
    if args.dry_run:
        print(f"{len(runs)} run(s) wait for a plan review and match; none decided (--dry-run).")
        return 0
    by = cli_actor(args)
    update_id = decision_id(by)
    outcome = await for_each(runs, lambda run: accept_plan(client, run.id, by, WAIT_SECONDS, update_id))
    return _report(outcome, "plan(s) accepted")


async def cancel(args: argparse.Namespace, settings: Settings) -> int:
    wanted = run_filter(args)
    if args.id is not None:
        _one_run(args, "filters")
        from cli.operate import cancel as cancel_one

        return await cancel_one(args, settings)
    if wanted == RunFilter():
        raise CliError("give a run ID, or filters that name the runs to cancel (e.g. --query \"DeerFlowPhase = "
                       "'awaiting_review'\", --older-than 7d)")
    client = await connect(settings, ensure_worker=False)
    runs = await _matching(client, wanted.model_copy(update={"running": True}))
    if args.dry_run:
        print(f"{len(runs)} running run(s) match; none cancelled (--dry-run).")
        return 0
    by = cli_actor(args)
    return _report(await for_each(runs, lambda run: cancel_run(client, run.id, by)), "cancelled")


def _one_run(args: argparse.Namespace, alternative: str) -> None:
    """Refuse filters given with one run's ID, and no ID at all."""
    if args.id is None:
        raise CliError(f"give a run ID, or {alternative}")
    given = [flag for name, flag in FLAGS.items() if getattr(args, name, None) is not None]
    if given or getattr(args, "dry_run", False):
        raise CliError(f"{', '.join(given) or '--dry-run'}: these choose many runs; not with a run ID")


async def _matching(client: Client, wanted: RunFilter) -> list[WorkflowExecution]:
    await missing_for(client, wanted)
    try:
        return await matching(client, wanted)
    except RPCError as error:
        raise CliError(f"Could not list runs: {error.message}") from error


def _report(outcome: BulkOutcome, decided: str) -> int:
    """The counts, then each run not decided with why; exit 1 when a decision failed, else
    ``EXIT_PENDING`` when one is not yet confirmed (a script can tell "look again later" from "act")."""
    print(outcome.line(decided))
    for note in outcome.notes:
        print(printable(f"  {note['id']}: {note['verdict']}: {note['reason']}"))
    if len(outcome.notes) < outcome.skipped + outcome.refused + outcome.pending + outcome.failed:
        print(f"  (the first {len(outcome.notes)} not decided are named)", file=sys.stderr)
    return 1 if outcome.failed else EXIT_PENDING if outcome.pending else 0
