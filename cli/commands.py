"""The subcommands of ``starter.py``. Each takes parsed arguments and returns an exit code."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from activities.resource_roots import ResourcePolicy
from activities.settings import get_settings
from cli.connection import CliError, connect
from cli.render import plan_text, review_help, status_text
from cli.terminal import printable, printable_json
from cli.watch import Watcher, WatchStats, watch
from runtime.converter import data_converter
from runtime.embedded import stop_embedded
from runtime.search_attributes import missing_search_attributes
from workflows.errors import failure_message
from workflows.models import (
    TASK_QUEUE,
    WORKFLOW_TYPE,
    Awaiting,
    Outcome,
    Phase,
    ResearchRequest,
    ResearchResult,
    ReviewOutcome,
    RunStatus,
)
from workflows.research import DeepResearchWorkflow
from workflows.review import ACCEPTED, EDIT_PLAN
from workflows.visibility import AWAITING, PHASE


def _run_id(question: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", question.lower()).strip("-")[:40] or "research"
    return f"research-{slug}-{uuid.uuid4().hex[:6]}"


async def _status(handle: WorkflowHandle) -> RunStatus:
    try:
        return await handle.query("status", result_type=RunStatus)
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"No research run with ID {handle.id!r}.") from error
        raise CliError(f"Could not read the status of {handle.id}: {error.message}") from error


def _write_report(result: ResearchResult, output: str | None) -> None:
    """The report as written to a file; on the screen, without the control sequences it may hold."""
    if output:
        Path(output).write_text(result.report, encoding="utf-8")
        print(f"Report written to {output}", file=sys.stderr)
    else:
        print(printable(result.report))


async def _result(handle: WorkflowHandle) -> ResearchResult:
    try:
        return await handle.result()
    except WorkflowFailureError as error:
        raise CliError(printable(f"Run {handle.id} failed: {failure_message(error.cause)}")) from error


async def _interactive_review(handle: WorkflowHandle) -> bool:
    """Ask on the terminal; returns False when the user leaves the plan waiting."""
    while True:
        answer = (await asyncio.to_thread(input, "Accept this plan? [a]ccept / [e]dit / [l]ater: ")).strip().lower()
        if answer in ("a", "accept", "y", "yes"):
            feedback = ACCEPTED
        elif answer in ("e", "edit"):
            change = (await asyncio.to_thread(input, "What should change? ")).strip()
            if not change:
                print("An edit needs a description of what to change.")
                continue
            feedback = f"{EDIT_PLAN} {change}"
        elif answer in ("l", "later", "q", "quit"):
            return False
        else:
            print("Please answer a, e or l.")
            continue
        outcome = await _send_review(handle, feedback)
        print(outcome.message)
        return True


async def _follow(handle: WorkflowHandle, interactive: bool) -> ResearchResult | None:
    """Show the run live until it ends; review plans and answer questions on a terminal.

    Returns None when the user leaves a plan or question waiting for later.
    """
    watcher = Watcher(live=sys.stderr.isatty(), out=sys.stderr)
    answered: tuple[str | None, int, int] | None = None
    while True:
        status = await watcher.follow(
            handle, until=lambda s, seen=answered: _needs_person(s) and _prompt_key(s) != seen
        )
        if watcher.closed is not None:
            break
        answered = _prompt_key(status)
        if status.awaiting is Awaiting.CLARIFICATION:
            print(printable(f"\nThe coordinator asks: {status.question}"))
            if not interactive:
                print(f"Answer with: python starter.py answer {handle.id} \"…\"", file=sys.stderr)
                continue
            if not await _interactive_answer(handle):
                print(f"Answer later with: python starter.py answer {handle.id} \"…\"")
                return None
            continue
        assert status.plan is not None
        print(plan_text(status.plan))
        if not interactive:
            print(review_help(handle.id), file=sys.stderr)
        elif not await _interactive_review(handle):
            print(review_help(handle.id))
            return None
    if watcher.stats.count:
        print(watcher.stats.summary(), file=sys.stderr)
    return await _result(handle)


def _needs_person(status: RunStatus) -> bool:
    return status.awaiting is not None


def _prompt_key(status: RunStatus) -> tuple[str | None, int, int]:
    """Identifies one request for a person, so each is asked once."""
    return status.awaiting, len(status.plan_history), status.clarification_rounds


async def _interactive_answer(handle: WorkflowHandle) -> bool:
    answer = (await asyncio.to_thread(input, "Your answer (empty to answer later): ")).strip()
    if not answer:
        return False
    await _send_answer(handle, answer)
    return True


async def _send_answer(handle: WorkflowHandle, answer: str) -> ReviewOutcome:
    return await _send_update(handle, Awaiting.CLARIFICATION.value, answer, "answer")


async def _send_review(handle: WorkflowHandle, feedback: str) -> ReviewOutcome:
    return await _send_update(handle, "review_plan", feedback, "feedback")


async def _send_update(handle: WorkflowHandle, update: str, value: str, what: str) -> ReviewOutcome:
    """Send a validated update; the workflow's validator's reason comes back as the error."""
    try:
        return await handle.execute_update(update, value, result_type=ReviewOutcome)
    except WorkflowUpdateFailedError as error:
        raise CliError(f"{what.capitalize()} rejected: {failure_message(error.cause)}") from error
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            # Updates to a closed run also answer NOT_FOUND: tell the two cases apart.
            description = await _describe(handle)
            raise CliError(f"Run {handle.id} has already ended ({description.status.name.lower()}); "
                           f"it is not waiting for {what}.") from error
        raise CliError(f"Could not send the {what} to {handle.id}: {error.message}") from error


def _request(args: argparse.Namespace) -> ResearchRequest:
    fields: dict[str, object] = {"question": args.question, "auto_accept_plan": args.auto_accept}
    optional = {"report_style": args.report_style, "locale": args.locale, "max_step_num": args.max_steps,
                "max_plan_iterations": args.max_plan_iterations, "max_search_results": args.max_search_results}
    fields.update({key: value for key, value in optional.items() if value is not None})
    if args.resource:
        missing = [path for path in args.resource if not Path(path).exists()]
        if missing:
            raise CliError(f"Resource not found: {', '.join(missing)}")
        # The worker resolves paths on its own machine: send them absolute, as the user meant them.
        fields["resources"] = [str(Path(path).resolve()) for path in args.resource]
        # The worker refuses resources outside its roots; say so before starting a run that would fail.
        policy = ResourcePolicy.from_settings(get_settings())
        refused = [path for path in args.resource if not policy.allows(Path(path).resolve())]
        if refused:
            raise CliError("\n".join(policy.refusal(path) for path in refused))
    if args.review_timeout:
        fields["review_timeout"] = args.review_timeout
    if args.review_timeout_action:
        fields["review_timeout_action"] = args.review_timeout_action
    fields["parallel_steps"] = args.parallel
    fields["enable_clarification"] = args.clarify
    if args.no_background:
        fields["enable_background_investigation"] = False
    if args.deep_thinking:
        fields["enable_deep_thinking"] = True
    try:
        return ResearchRequest.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise CliError(f"Invalid request: {problems}") from error


async def run(args: argparse.Namespace) -> int:
    request = _request(args)
    client = await connect()
    run_id = args.id or _run_id(request.question)
    try:
        handle = await client.start_workflow(
            WORKFLOW_TYPE, request, id=run_id, task_queue=TASK_QUEUE, result_type=ResearchResult,
            static_summary=f"Research: {request.question[:180]}",
        )
    except WorkflowAlreadyStartedError as error:
        raise CliError(f"A run with ID {run_id!r} already exists; choose another --id.") from error
    print(f"Started research run {run_id}", file=sys.stderr)
    if args.no_wait:
        print(run_id)
        return 0
    result = await _follow(handle, interactive=sys.stdin.isatty() and not request.auto_accept_plan)
    if result is None:
        return 0
    _write_report(result, args.output)
    return 1 if result.outcome is Outcome.FAILED else 0


async def review(args: argparse.Namespace) -> int:
    client = await connect()
    feedback = ACCEPTED if args.accept else f"{EDIT_PLAN} {args.edit}"
    outcome = await _send_review(client.get_workflow_handle(args.id), feedback)
    print(outcome.message)
    return 0


async def answer(args: argparse.Namespace) -> int:
    client = await connect()
    outcome = await _send_answer(client.get_workflow_handle(args.id), args.text)
    print(outcome.message)
    return 0


async def watch_run(args: argparse.Namespace) -> int:
    client = await connect()  # the status query needs a worker
    stats = WatchStats()
    final = await watch(client.get_workflow_handle(args.id), live=sys.stdout.isatty() and not args.plain,
                        out=sys.stdout, stats=stats)
    if args.stats:
        print(stats.summary(), file=sys.stderr)
    return 1 if final.phase is Phase.FAILED else 0


async def status(args: argparse.Namespace) -> int:
    client = await connect(ensure_worker=False)
    current = await _status(client.get_workflow_handle(args.id))
    print(printable_json(current.model_dump_json(indent=2)) if args.json else status_text(args.id, current))
    return 0


async def report(args: argparse.Namespace) -> int:
    client = await connect(ensure_worker=False)
    handle = client.get_workflow_handle(args.id, result_type=ResearchResult)
    description = await _describe(handle)
    if description.status == WorkflowExecutionStatus.RUNNING:
        current = await _status(handle)
        raise CliError(f"Run {args.id} has no report yet: it is {current.phase.value.replace('_', ' ')}.")
    _write_report(await _result(handle), args.output)
    return 0


async def _describe(handle: WorkflowHandle):  # type: ignore[no-untyped-def]
    try:
        return await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"No research run with ID {handle.id!r}.") from error
        raise CliError(f"Could not describe {handle.id}: {error.message}") from error


async def list_runs(args: argparse.Namespace) -> int:
    """Runs with their phase and age; ``--awaiting-review`` filters by the DeerFlowAwaiting attribute.

    Where the namespace lacks our search attributes, the phase of each running run is read with
    the status query instead (slower, same answer).
    """
    client = await connect(ensure_worker=False)
    now = datetime.now(UTC)
    query = f"WorkflowType = '{WORKFLOW_TYPE}'"
    if args.running or args.awaiting_review:
        query += " AND ExecutionStatus = 'Running'"
    indexed = await _has_search_attributes(client)
    if args.awaiting_review and indexed:
        query += f" AND {AWAITING.name} = '{Awaiting.PLAN_FEEDBACK.value}'"
    print(f"{'ID':50} {'STATUS':10} {'PHASE':24} {'AGE':>12}")
    async for execution in client.list_workflows(query, limit=args.limit):
        phase = execution.typed_search_attributes.get(PHASE)
        if phase is None and execution.status == WorkflowExecutionStatus.RUNNING:
            current = await _status(client.get_workflow_handle(execution.id))
            phase = current.phase.value + (f" ({current.awaiting.value})" if current.awaiting else "")
            if args.awaiting_review and current.awaiting is not Awaiting.PLAN_FEEDBACK:
                continue
        age = str(now - execution.start_time).split(".")[0]
        status_name = execution.status.name.lower() if execution.status else "unknown"
        print(printable(f"{execution.id:50} {status_name:10} {phase or '-':24} {age:>12}"))
    return 0


async def _has_search_attributes(client: Client) -> bool:
    try:
        return not await missing_search_attributes(client)
    except (RPCError, ValueError):
        return False


async def cancel(args: argparse.Namespace) -> int:
    client = await connect(ensure_worker=False)
    handle = client.get_workflow_handle(args.id)
    await _describe(handle)
    await handle.cancel()
    print(f"Cancellation requested for {args.id}")
    return 0


async def history(args: argparse.Namespace) -> int:
    client = await connect(ensure_worker=False)
    handle = client.get_workflow_handle(args.id)
    await _describe(handle)
    recorded = await handle.fetch_history()
    Path(args.output).write_text(recorded.to_json(), encoding="utf-8")
    print(f"History of {args.id} ({len(recorded.events)} events) written to {args.output}")
    return 0


async def replay(args: argparse.Namespace) -> int:
    if args.file:
        try:
            recorded = WorkflowHistory.from_json(args.id or Path(args.file).stem, Path(args.file).read_text())
        except (OSError, ValueError) as error:
            raise CliError(f"Cannot read history file {args.file}: {error}") from error
    elif args.id:
        client = await connect(ensure_worker=False)
        handle = client.get_workflow_handle(args.id)
        await _describe(handle)
        recorded = await handle.fetch_history()
    else:
        raise CliError("replay needs a run ID or --file FILE.json")
    replayer = Replayer(workflows=[DeepResearchWorkflow], data_converter=data_converter())
    outcome = await replayer.replay_workflow(recorded, raise_on_replay_failure=False)
    if outcome.replay_failure is not None:
        print(f"Replay FAILED for {recorded.workflow_id}: {outcome.replay_failure}")
        return 1
    print(f"Replay OK: {recorded.workflow_id} ({len(recorded.events)} events) is deterministic with this code.")
    return 0


async def down(args: argparse.Namespace) -> int:
    stopped = stop_embedded()
    print(f"Stopped: {', '.join(stopped)}" if stopped else "Nothing to stop.")
    return 0
