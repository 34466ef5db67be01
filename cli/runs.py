"""One research run as the commands read it: its status, description, result and report, with the
errors a user can act on; and the ``status`` and ``report`` commands, which are only that."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import CancelledError, TerminatedError
from temporalio.service import RPCError, RPCStatusCode

from cli.render import ended_label, status_text
from cli.terminal import printable, printable_json
from cli.waiting import noticed
from config.settings import Settings
from runtime import research_client
from runtime.forks import ForkListed, forks_of
from runtime.front_door import NO_WORKER_ADVICE, CliError, connect, revive_worker
from runtime.retries import retries_of
from workflows.calls.errors import failure_message
from workflows.contracts.research import Outcome, ResearchResult
from workflows.contracts.status import RunStatus
from workflows.research.status_view import offline_notice
from workflows.research.visibility import indexed_place


async def _status(handle: WorkflowHandle) -> RunStatus:
    try:
        return await research_client.status(handle)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"No research run with ID {handle.id!r}.") from error
        if "poller" in error.message:  # the server's words for "no worker polls the task queue"
            raise CliError(f"Could not read the status of {handle.id}: {NO_WORKER_ADVICE}.") from error
        raise CliError(f"Could not read the status of {handle.id}: {error.message}") from error


async def _task_failure(handle: WorkflowHandle) -> str:
    """The last workflow task failure the run's history records (a worker without the keys names
    the setting; the server records the first of a series only)."""
    message = "(nothing recorded)"
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            message = event.workflow_task_failed_event_attributes.failure.message
    return printable(message[:500])


async def _describe(handle: WorkflowHandle):  # type: ignore[no-untyped-def]
    try:
        return await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"No research run with ID {handle.id!r}.") from error
        raise CliError(f"Could not describe {handle.id}: {error.message}") from error


def _check_output(output: str | None) -> None:
    """Refuse an output file that cannot be written, before any work (a run can take minutes)."""
    if output is None:
        return
    path = Path(output)
    if path.is_dir():
        raise CliError(f"Cannot write to {output}: it is a directory.")
    parent = path.parent
    if not parent.is_dir():
        raise CliError(f"Cannot write to {output}: the folder {parent} does not exist.")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CliError(f"Cannot write to {output}: permission denied.")


def _write_file(output: str, text: str) -> None:
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as error:
        raise CliError(f"Cannot write to {output}: {error.strerror or error}.") from error


# ``run``'s and ``report``'s exit code by outcome: a script can tell research from a reply that did none.
EXIT_CODES = {Outcome.REPORT: 0, Outcome.FAILED: 1, Outcome.DIRECT_REPLY: 3, Outcome.CANCELLED: 4}


# The same codes for a run that ended without a result (the server's words, from ``ended_label``):
# cancelled and terminated from outside as cancelled, the others as failed.
ENDED_EXIT_CODES = {"cancelled": EXIT_CODES[Outcome.CANCELLED], "terminated": EXIT_CODES[Outcome.CANCELLED]}


def _write_report(result: ResearchResult, output: str | None, notice: str | None) -> None:
    """The report as written to a file; on the screen, without the control sequences it may hold.

    A report that a bundled offline provider (the demonstration model, the search corpus or both)
    served says so in its first line (``notice``), so a saved copy cannot pass for research.
    """
    report = f"> {notice}\n\n{result.report}" if notice else result.report
    if output:
        _write_file(output, report)
        print(f"Report written to {output}", file=sys.stderr)
    else:
        print(printable(report))


async def _offline_notice(handle: WorkflowHandle) -> str | None:
    """What the report must say about the bundled offline providers that served the run, from its
    status; a report is still given when no worker can answer, with a warning that it could not be checked."""
    try:
        return offline_notice(await _status(handle))
    except CliError as error:
        print(f"Could not check whether the offline demonstration model wrote this report: {error}", file=sys.stderr)
        return None


async def _result(handle: WorkflowHandle) -> ResearchResult:
    try:
        return await handle.result()
    except WorkflowFailureError as error:
        ended = ("cancelled" if isinstance(error.cause, CancelledError)
                 else "terminated" if isinstance(error.cause, TerminatedError) else "failed")
        raise CliError(printable(f"Run {handle.id} {ended}: {failure_message(error.cause)}"),
                       exit_code=ENDED_EXIT_CODES.get(ended, EXIT_CODES[Outcome.FAILED])) from error


async def status(args: argparse.Namespace, settings: Settings) -> int:
    """The run's last status, headed by how it ended when it did not complete (cancelled, …).

    The query needs a worker even for a closed run (it replays the run to answer), so the
    embedded worker is revived first; where none answers, an ended run is still reported.
    """
    client = await connect(settings)
    handle = client.get_workflow_handle(args.id)
    description = await _describe(handle)
    ended = ended_label(description.status)
    running = description.status == WorkflowExecutionStatus.RUNNING
    retries = retries_of(description.raw_description) if running else []
    task_attempt = description.raw_description.pending_workflow_task.attempt if running else 0
    if task_attempt > 1:  # the query would wait on that task; say what its worker said
        raise CliError(f"Run {args.id} waits: its workflow task failed on a worker and is being retried (attempt "
                       f"{task_attempt}); the worker said: {await _task_failure(handle)}")
    try:
        current = await noticed(_status(handle), f"No worker has answered for {args.id} yet; still waiting "
                                "(with none running, the server gives up after about 30 s).")
    except CliError as error:
        if ended is None:
            raise CliError(f"{error}{_indexed(description)}") from error
        raise CliError(f"Run {args.id} was {ended}; its last phase is unknown ({error})") from error
    forks = await _forks(client, args.id)
    if args.json:
        shown = current.model_dump(mode="json")  # not model_dump_json: it refuses a lone surrogate
        shown = {"ended": ended, **shown, "retries": [asdict(retry) for retry in retries],
                 "forks": [{**asdict(fork), "started_by": fork.started_by.model_dump(mode="json")
                            if fork.started_by else None} for fork in forks]}
        print(printable_json(json.dumps(shown, indent=2, ensure_ascii=False)))
    else:
        print(status_text(args.id, current, ended=ended, retries=retries, forks=forks))
    return 0


async def _forks(client: Client, run_id: str) -> list[ForkListed]:
    """The run's forks, as the server's index lists them (none, with a warning, where it cannot)."""
    try:
        return await forks_of(client, run_id)
    except RPCError as error:
        print(f"Warning: the forks of {run_id} could not be listed: {error.message}", file=sys.stderr)
        return []


def _indexed(description: WorkflowExecutionDescription) -> str:
    """What the server's index holds of a run no worker answers for: the phase and what it awaits
    (the search attributes the run upserts), so a user still learns where it stands."""
    phase, awaiting = indexed_place(description.typed_search_attributes)
    if phase is None:  # a server without the attributes registered, or a run that never set them
        return ""
    # Anyone who may start runs may also set these attributes: shown as text, never as terminal controls.
    return printable(f" The server's index has it at phase {phase}" + (f", awaiting {awaiting}." if awaiting else "."))


async def report(args: argparse.Namespace, settings: Settings) -> int:
    _check_output(args.output)
    client = await connect(settings, ensure_worker=False)
    handle = client.get_workflow_handle(args.id, result_type=ResearchResult)
    description = await _describe(handle)
    if description.status == WorkflowExecutionStatus.RUNNING:
        current = await _status(handle)
        raise CliError(f"Run {args.id} has no report yet: it is {current.phase.value.replace('_', ' ')}.")
    ended = ended_label(description.status)
    if ended not in (None, "failed"):  # a failed run's result says why; the others ended from outside
        raise CliError(f"Run {args.id} was {ended} and has no report; `python starter.py status {args.id}` "
                       "shows where it stood.", exit_code=ENDED_EXIT_CODES.get(ended, EXIT_CODES[Outcome.FAILED]))
    result = await _result(handle)
    await revive_worker(client, settings)  # the status query of a closed run replays it on a worker
    _write_report(result, args.output, await _offline_notice(handle))
    return EXIT_CODES.get(result.outcome, 0)
