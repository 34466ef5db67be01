"""The subcommands of ``starter.py``. Each takes parsed arguments and returns an exit code."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import unicodedata
import uuid
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, CancelledError, TerminatedError, WorkflowAlreadyStartedError
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
from temporalio.service import RPCError, RPCStatusCode

from cli.render import ended_label, plan_text, review_help, status_text
from cli.terminal import printable, printable_json
from cli.watch import Watcher, WatchStats, watch
from config.resources import ResourcePolicy
from config.settings import load_settings
from runtime.converter import data_converter
from runtime.embedded import stop_embedded
from runtime.front_door import NO_WORKER_ADVICE, CliError, connect, revive_worker
from runtime.history_export import self_contained
from runtime.retries import retries_of
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
from workflows.review import ACCEPTED, EDIT_PLAN
from workflows.status_view import offline_notice, outcome_lines
from workflows.visibility import AWAITING, PHASE


def _run_id(question: str) -> str:
    """``research-<slug>-<hex>``: the question's first words in any script, accents dropped.

    Letters of every script stay (a Chinese question gives a Chinese slug); punctuation, symbols
    and control characters become dashes, so the ID is safe to paste into a shell.
    """
    plain = "".join(c for c in unicodedata.normalize("NFKD", question) if not unicodedata.combining(c))
    slug = re.sub(r"[\W_]+", "-", plain.lower()).strip("-")[:40].strip("-")
    return f"research-{slug}-{uuid.uuid4().hex[:6]}" if slug else f"research-{uuid.uuid4().hex[:8]}"


async def _status(handle: WorkflowHandle) -> RunStatus:
    try:
        return await handle.query("status", result_type=RunStatus)
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


async def _follow(handle: WorkflowHandle, interactive: bool, *, verbose: bool = False,
                  output: str | None = None) -> ResearchResult | None:
    """Show the run live until it ends; review plans and answer questions on a terminal.

    Returns None when the user leaves a plan or question waiting for later; ``output`` is then
    named in the command that writes the report once the run is done.
    """
    client = handle._client  # the handle's client; the SDK exposes no public accessor
    watcher = Watcher(live=sys.stderr.isatty(), out=sys.stderr, on_no_worker=lambda: revive_worker(client))
    later = f"python starter.py report {handle.id}" + (f" -o {output}" if output else "")
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
                print(f"Then, once the run is done: {later}")
                return None
            continue
        assert status.plan is not None
        if not watcher.live:  # on a terminal the panel above shows the whole plan: not twice
            print(plan_text(status.plan))
        if not interactive:
            print(review_help(handle.id), file=sys.stderr)
        elif not await _interactive_review(handle):
            print(review_help(handle.id))
            print(f"Then, once the run is done: {later}")
            return None
    if verbose and watcher.stats.count:
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
            ended = ended_label((await _describe(handle)).status) or "completed"
            raise CliError(f"Run {handle.id} has already ended ({ended}); it is not waiting for {what}.") from error
        raise CliError(f"Could not send the {what} to {handle.id}: {error.message}") from error


# A BCP 47 language tag as people write them: language, then optional script, region and variants.
BCP47 = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z]{4})?(-([A-Za-z]{2}|[0-9]{3}))?(-([A-Za-z0-9]{5,8}|[0-9][A-Za-z0-9]{3}))*")


def _question(args: argparse.Namespace) -> str:
    """The question from the argument, stdin (``-``) or ``--question-file``: exactly one of them.

    stdin and a file lift the OS limit on one argument (about 128 KiB).
    """
    if (args.question is None) == (args.question_file is None):
        raise CliError("Give the question as an argument, as - to read it from stdin, or with --question-file FILE.")
    if args.question_file is not None:
        try:
            return Path(args.question_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise CliError(f"Cannot read the question file {args.question_file}: {error}") from error
    if args.question == "-":
        if sys.stdin.isatty():
            print("Type the question, then Ctrl-D:", file=sys.stderr)
        return sys.stdin.read()
    return str(args.question)


def _request(args: argparse.Namespace) -> ResearchRequest:
    fields: dict[str, object] = {"question": args.question, "auto_accept_plan": args.auto_accept}
    if args.locale is not None and not BCP47.fullmatch(args.locale):
        print(f"Warning: --locale {printable(args.locale)!r} is not a BCP 47 language tag (like en-US or zh-CN); "
              "the report may not be written in the language you meant.", file=sys.stderr)
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
        policy = ResourcePolicy.from_settings(load_settings())
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
    if args.no_web:
        fields["enable_web_search"] = False
    if args.deep_thinking:
        fields["enable_deep_thinking"] = True
    try:
        return ResearchRequest.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise CliError(f"Invalid request: {problems}") from error


async def run(args: argparse.Namespace) -> int:
    from_stdin = args.question == "-"
    args.question = _question(args)
    request = _request(args)
    _check_output(args.output)
    client = await connect()
    run_id = args.id = args.id or _run_id(request.question)  # args.id: named by the Ctrl-C hint
    # A closed run's ID is taken too, unless --force: a second run would hide the first one's report.
    reuse = WorkflowIDReusePolicy.ALLOW_DUPLICATE if args.force else WorkflowIDReusePolicy.REJECT_DUPLICATE
    try:
        handle = await client.start_workflow(
            WORKFLOW_TYPE, request, id=run_id, task_queue=TASK_QUEUE, result_type=ResearchResult,
            static_summary=f"Research: {request.question[:180]}", id_reuse_policy=reuse,
        )
    except WorkflowAlreadyStartedError as error:
        raise CliError(await _id_taken(client.get_workflow_handle(run_id))) from error
    print(f"Started research run {run_id}", file=sys.stderr)
    if args.no_wait:
        print(run_id)
        return 0
    interactive = sys.stdin.isatty() and not from_stdin and not request.auto_accept_plan
    result = await _follow(handle, interactive=interactive, verbose=args.verbose, output=args.output)
    if result is None:
        return 0
    _write_report(result, args.output, await _offline_notice(handle))
    for line in outcome_lines(RunStatus(phase=Phase.COMPLETED, outcome=result.outcome, notes=result.notes)):
        print(printable(line), file=sys.stderr)
    return EXIT_CODES.get(result.outcome, 0)


async def _id_taken(handle: WorkflowHandle) -> str:
    state = (await _describe(handle)).status
    if state == WorkflowExecutionStatus.RUNNING:
        return (f"A run with ID {handle.id!r} is still running: follow it with `python starter.py watch {handle.id}`, "
                "or choose another --id.")
    return (f"A run with ID {handle.id!r} already exists ({ended_label(state) or 'completed'}): read it with "
            f"`python starter.py report {handle.id}` or `status {handle.id}`. Choose another --id, or pass --force "
            "to start a new run under this ID (the old one stays in history).")


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
                        out=sys.stdout, stats=stats, on_no_worker=lambda: revive_worker(client))
    if args.stats:
        print(stats.summary(), file=sys.stderr)
    return 1 if final.phase is Phase.FAILED else 0


async def status(args: argparse.Namespace) -> int:
    """The run's last status, headed by how it ended when it did not complete (cancelled, …).

    The query needs a worker even for a closed run (it replays the run to answer), so the
    embedded worker is revived first; where none answers, an ended run is still reported.
    """
    client = await connect()
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
        current = await _status(handle)
    except CliError as error:
        if ended is None:
            raise
        raise CliError(f"Run {args.id} was {ended}; its last phase is unknown ({error})") from error
    if args.json:
        shown = json.loads(current.model_dump_json())
        shown = {"ended": ended, **shown, "retries": [asdict(retry) for retry in retries]}
        print(printable_json(json.dumps(shown, indent=2, ensure_ascii=False)))
    else:
        print(status_text(args.id, current, ended=ended, retries=retries))
    return 0


async def report(args: argparse.Namespace) -> int:
    _check_output(args.output)
    client = await connect(ensure_worker=False)
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
    await revive_worker(client)  # the status query of a closed run replays it on a worker
    _write_report(result, args.output, await _offline_notice(handle))
    return EXIT_CODES.get(result.outcome, 0)


async def _describe(handle: WorkflowHandle):  # type: ignore[no-untyped-def]
    try:
        return await handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"No research run with ID {handle.id!r}.") from error
        raise CliError(f"Could not describe {handle.id}: {error.message}") from error


async def list_runs(args: argparse.Namespace) -> int:
    """Runs with how they stand (running, or how they ended), their phase and age.

    ``--awaiting-review`` filters by the DeerFlowAwaiting attribute. Where the namespace lacks our
    search attributes, the phase of each running run is read with the status query instead
    (slower, same answer). A row whose query fails says why; it never fails the list.
    """
    client = await connect(ensure_worker=False)
    now = datetime.now(UTC)
    query = f"WorkflowType = '{WORKFLOW_TYPE}'"
    if args.running or args.awaiting_review:
        query += " AND ExecutionStatus = 'Running'"
    indexed = await _has_search_attributes(client)
    if args.awaiting_review and indexed:
        query += f" AND {AWAITING.name} = '{Awaiting.PLAN_FEEDBACK.value}'"
    rows: list[tuple[str, str, str, str]] = []
    try:
        async for execution in client.list_workflows(query, limit=args.limit):
            phase = execution.typed_search_attributes.get(PHASE)
            if phase is None and execution.status == WorkflowExecutionStatus.RUNNING:
                try:
                    current = await _status(client.get_workflow_handle(execution.id))
                except CliError as error:
                    phase = f"? {error}"
                else:
                    phase = current.phase.value + (f" ({current.awaiting.value})" if current.awaiting else "")
                    if args.awaiting_review and current.awaiting is not Awaiting.PLAN_FEEDBACK:
                        continue
            age = str(now - execution.start_time).split(".")[0]
            state = ended_label(execution.status) or (execution.status.name.lower() if execution.status else "unknown")
            rows.append((execution.id, state, phase or "-", age))
    except RPCError as error:
        raise CliError(f"Could not list runs: {error.message}") from error
    print(_table(("ID", "STATUS", "PHASE", "AGE"), rows))
    return 0


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Columns as wide as their content (the last one right-aligned: ages line up)."""
    cells = [header, *[tuple(printable(cell) for cell in row) for row in rows]]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) if column == len(header) - 1 else cell.ljust(width)
                  for column, (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
        for row in cells
    )


async def _has_search_attributes(client: Client) -> bool:
    try:
        return not await missing_search_attributes(client)
    except (RPCError, ValueError):
        return False


async def cancel(args: argparse.Namespace) -> int:
    client = await connect(ensure_worker=False)
    handle = client.get_workflow_handle(args.id)
    ended = ended_label((await _describe(handle)).status)
    if ended is not None:
        raise CliError(f"Run {args.id} has already ended ({ended}); there is nothing to cancel.")
    await handle.cancel()
    print(f"Cancellation requested for {args.id}")
    return 0


async def history(args: argparse.Namespace) -> int:
    _check_output(args.output)
    client = await connect(ensure_worker=False)
    handle = client.get_workflow_handle(args.id)
    await _describe(handle)
    recorded = await handle.fetch_history()
    if not args.raw:
        recorded = await _resolved(recorded, client.data_converter, "or export with --raw")
    if args.output is None:
        print(recorded.to_json())
        return 0
    _write_file(args.output, recorded.to_json())
    print(f"History of {args.id} ({len(recorded.events)} events) written to {args.output}", file=sys.stderr)
    return 0


async def _resolved(recorded: WorkflowHistory, converter: DataConverter, otherwise: str) -> WorkflowHistory:
    """The history with its payload references resolved (runtime/history_export.py), or one clear
    error when a blob or a key is missing (a replay would otherwise misreport it as non-determinism)."""
    try:
        return await self_contained(recorded, converter)
    except (ApplicationError, RuntimeError) as error:
        raise CliError(f"Cannot read the payloads of {recorded.workflow_id} from the blob store: "
                       f"{str(error).rstrip('.')}. "
                       f"Use the worker's DEERFLOW_HOME or S3 settings (and encryption keys), {otherwise}.") from error


async def replay(args: argparse.Namespace) -> int:
    if args.file:
        try:
            recorded = WorkflowHistory.from_json(args.id or "", Path(args.file).read_text())
        except (OSError, ValueError) as error:
            raise CliError(f"Cannot read history file {args.file}: {error}") from error
        recorded = WorkflowHistory(args.id or _history_run_name(recorded, args.file), recorded.events)
    elif args.id:
        client = await connect(ensure_worker=False)
        handle = client.get_workflow_handle(args.id)
        await _describe(handle)
        recorded = await handle.fetch_history()
    else:
        raise CliError("replay needs a run ID or --file FILE.json")
    # The core would also log the failure as a coloured Rust warning; our one line says it already.
    quiet = Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=TelemetryFilter("ERROR", "ERROR"))))
    # Imported here: the workflow and the SDK's worker are heavy, and only replay needs them.
    from temporalio.worker import Replayer

    from runtime.message_payloads import worker_converter
    from runtime.workflow_runner import workflow_runner
    from workflows.catalog import WORKFLOWS

    converter = data_converter(load_settings())
    recorded = await _resolved(recorded, converter, "or replay a file written by `starter.py history` (self-contained)")
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=worker_converter(converter), runtime=quiet,
                        workflow_runner=workflow_runner())
    outcome = await replayer.replay_workflow(recorded, raise_on_replay_failure=False)
    if outcome.replay_failure is not None:
        print(printable(f"Replay FAILED for {recorded.workflow_id}: {_failure_text(outcome.replay_failure)}"))
        return 1
    print(f"Replay OK: {recorded.workflow_id} ({len(recorded.events)} events) is deterministic with this code.")
    return 0


def _history_run_name(recorded: WorkflowHistory, file: str) -> str:
    """The run a history file records, by its workflow ID where the server wrote it, else by the file."""
    started = recorded.events[0] if recorded.events else None
    if started is not None and started.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        workflow_id = started.workflow_execution_started_event_attributes.workflow_id
        if workflow_id:
            return workflow_id
    return f"the run in {file}"


def _failure_text(failure: BaseException) -> str:
    """The replayer's failure as a sentence: the core reports it as Rust debug text with colour codes."""
    text = " ".join(printable(str(failure)).split())
    message = re.search(r'message: "((?:[^"\\]|\\.)*)"', text)
    return message.group(1).replace('\\"', '"') if message else text


async def down(args: argparse.Namespace) -> int:
    stopped = stop_embedded()
    print(f"Stopped: {', '.join(stopped)}" if stopped else "Nothing to stop.")
    return 0
