"""``run``, ``review`` and ``answer``: start a research run, follow it, and steer it where it waits
for a person (a plan to review, a clarifying question)."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import uuid
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from cli.actor import cli_actor
from cli.main import RunInterrupted
from cli.render import ended_label, plan_text, review_help
from cli.runs import EXIT_CODES, _check_output, _describe, _offline_notice, _result, _write_report
from cli.terminal import printable
from cli.waiting import noticed
from config.resources import ResourcePolicy
from config.settings import Settings
from runtime import research_client
from runtime.front_door import CliError, connect, revive_worker
from runtime.run_names import question_slug
from workflows.calls.errors import failure_message
from workflows.contracts.budget import BudgetAction, BudgetDecision
from workflows.contracts.decisions import Actor
from workflows.contracts.research import ResearchRequest, ResearchResult, ReviewOutcome
from workflows.contracts.status import Awaiting, Phase, RunStatus
from workflows.research.review import ACCEPTED, EDIT_PLAN
from workflows.research.status_view import decision_lines, outcome_lines
from workflows.text.untrusted_text import without_lone_surrogates


def _run_id(question: str) -> str:
    """``research-<slug>-<hex>``: the question's first words in any script, accents dropped.

    Letters of every script stay (a Chinese question gives a Chinese slug); punctuation, symbols
    and control characters become dashes, so the ID is safe to paste into a shell.
    """
    slug = question_slug(question)
    return f"research-{slug}-{uuid.uuid4().hex[:6]}" if slug else f"research-{uuid.uuid4().hex[:8]}"


# A BCP 47 language tag as people write them: language, then optional script, region and variants.
BCP47 = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z]{4})?(-([A-Za-z]{2}|[0-9]{3}))?(-([A-Za-z0-9]{5,8}|[0-9][A-Za-z0-9]{3}))*")


def warn_of_locale(locale: str | None) -> None:
    """A ``--locale`` that is no language tag is sent as given, with a warning."""
    if locale is not None and not BCP47.fullmatch(locale):
        print(f"Warning: --locale {printable(locale)!r} is not a BCP 47 language tag (like en-US or zh-CN); "
              "the report may not be written in the language you meant.", file=sys.stderr)


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
        try:
            return without_lone_surrogates(sys.stdin.read())  # UTF-8 mode reads other bytes as surrogates
        except UnicodeDecodeError as error:
            raise CliError(f"Cannot read the question from standard input: {error}") from error
    return str(args.question)


def _request(args: argparse.Namespace, question: str, settings: Settings) -> ResearchRequest:
    """The request ``run``'s flags describe, for ``question`` (read by ``_question``); ``settings``
    name the resource roots the worker will hold its resources to."""
    fields: dict[str, object] = {"question": question, "auto_accept_plan": args.auto_accept}
    warn_of_locale(args.locale)
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
        policy = ResourcePolicy.from_settings(settings)
        refused = [path for path in args.resource if not policy.allows(Path(path).resolve())]
        if refused:
            raise CliError("\n".join(policy.refusal(path) for path in refused))
    if args.review_timeout:
        fields["review_timeout"] = args.review_timeout
    if args.review_timeout_action:
        fields["review_timeout_action"] = args.review_timeout_action
    fields["parallel_steps"] = args.parallel
    if args.token_budget:
        fields["token_budget"] = args.token_budget
    if args.cost_budget:
        fields["cost_budget_usd"] = args.cost_budget
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


async def run(args: argparse.Namespace, settings: Settings) -> int:
    request = _request(args, _question(args), settings)
    _check_output(args.output)
    client = await connect(settings)
    run_id = args.id or _run_id(request.question)
    try:
        return await _start_and_follow(client, request, run_id, args, settings)
    except asyncio.CancelledError:
        # asyncio.run's answer to Ctrl-C: the command's task is cancelled. The run is not; say which it is.
        raise RunInterrupted(run_id) from None


async def _start_and_follow(client: Client, request: ResearchRequest, run_id: str, args: argparse.Namespace,
                            settings: Settings) -> int:
    # A closed run's ID is taken too, unless --force: a second run would hide the first one's report.
    reuse = WorkflowIDReusePolicy.ALLOW_DUPLICATE if args.force else WorkflowIDReusePolicy.REJECT_DUPLICATE
    try:
        handle = await research_client.start(client, request, run_id=run_id, id_reuse_policy=reuse,
                                             summary=f"Research: {request.question[:180]}",
                                             started_by=cli_actor(args))
    except WorkflowAlreadyStartedError as error:
        raise CliError(await _id_taken(client.get_workflow_handle(run_id))) from error
    print(f"Started research run {run_id}", file=sys.stderr)
    interactive = sys.stdin.isatty() and args.question != "-" and not request.auto_accept_plan
    return await follow_to_report(handle, args, settings, interactive=interactive)


async def follow_to_report(handle: WorkflowHandle, args: argparse.Namespace, settings: Settings, *,
                           interactive: bool) -> int:
    """After a start: the run's ID (``--no-wait``), or the run followed to its report, with how it
    ended and who decided what; the exit code says the outcome."""
    if args.no_wait:
        print(handle.id)
        return 0
    result = await _follow(handle, settings, cli_actor(args), interactive=interactive, verbose=args.verbose,
                           output=args.output)
    if result is None:
        return 0
    _write_report(result, args.output, await _offline_notice(handle))
    for line in outcome_lines(RunStatus(phase=Phase.COMPLETED, outcome=result.outcome, notes=result.notes)):
        print(printable(line), file=sys.stderr)
    for line in decision_lines(result.decisions):
        print(printable(f"Decided: {line}"), file=sys.stderr)
    return EXIT_CODES.get(result.outcome, 0)


async def _id_taken(handle: WorkflowHandle) -> str:
    state = (await _describe(handle)).status
    if state == WorkflowExecutionStatus.RUNNING:
        return (f"A run with ID {handle.id!r} is still running: follow it with `python starter.py watch {handle.id}`, "
                "or choose another --id.")
    return (f"A run with ID {handle.id!r} already exists ({ended_label(state) or 'completed'}): read it with "
            f"`python starter.py report {handle.id}` or `status {handle.id}`. Choose another --id, or pass --force "
            "to start a new run under this ID (the old one stays in history).")


async def _follow(handle: WorkflowHandle, settings: Settings, by: Actor, interactive: bool, *, verbose: bool = False,
                  output: str | None = None) -> ResearchResult | None:
    """Show the run live until it ends; review plans and answer questions on a terminal (as ``by``).

    Returns None when the user leaves a plan or question waiting for later; ``output`` is then
    named in the command that writes the report once the run is done.
    """
    # Imported here: rich and the live view are for following a run (review, answer and budget start without them).
    from cli.watch import Watcher

    client = handle._client  # the handle's client; the SDK exposes no public accessor
    watcher = Watcher(live=sys.stderr.isatty(), out=sys.stderr, on_no_worker=lambda: revive_worker(client, settings))
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
            if not await _interactive_answer(handle, by):
                print(f"Answer later with: python starter.py answer {handle.id} \"…\"")
                print(f"Then, once the run is done: {later}")
                return None
            continue
        assert status.plan is not None
        if not watcher.live:  # on a terminal the panel above shows the whole plan: not twice
            print(plan_text(status.plan))
        if not interactive:
            print(review_help(handle.id), file=sys.stderr)
        elif not await _interactive_review(handle, by):
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


async def _interactive_review(handle: WorkflowHandle, by: Actor) -> bool:
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
        outcome = await _send_review(handle, feedback, by)
        print(outcome.message)
        return True


async def _interactive_answer(handle: WorkflowHandle, by: Actor) -> bool:
    answer = (await asyncio.to_thread(input, "Your answer (empty to answer later): ")).strip()
    if not answer:
        return False
    await _send_answer(handle, answer, by)
    return True


async def review(args: argparse.Namespace, settings: Settings) -> int:
    client = await connect(settings)
    feedback = ACCEPTED if args.accept else f"{EDIT_PLAN} {args.edit}"
    outcome = await _send_review(client.get_workflow_handle(args.id), feedback, cli_actor(args))
    print(outcome.message)
    return 0


async def answer(args: argparse.Namespace, settings: Settings) -> int:
    client = await connect(settings)
    outcome = await _send_answer(client.get_workflow_handle(args.id), args.text, cli_actor(args))
    print(outcome.message)
    return 0


async def budget(args: argparse.Namespace, settings: Settings) -> int:
    raising = args.raise_to is not None or args.raise_usd is not None
    if raising == bool(args.finish or args.cancel):
        raise CliError("say one of --raise TOKENS and/or --raise-usd USD, --finish, --cancel")
    client = await connect(settings)
    action = BudgetAction.RAISE if raising else BudgetAction.FINISH if args.finish else BudgetAction.CANCEL
    decision = BudgetDecision(action=action, tokens=args.raise_to, cost_usd=args.raise_usd)
    outcome = await _send_update(client.get_workflow_handle(args.id), _budget_update, decision, cli_actor(args),
                                 "budget decision")
    print(outcome.message)
    return 0


async def _budget_update(handle: WorkflowHandle, decision: BudgetDecision, by: Actor) -> ReviewOutcome:
    return await research_client.decide_budget(handle, decision, by)


async def _send_answer(handle: WorkflowHandle, answer: str, by: Actor) -> ReviewOutcome:
    return await _send_update(handle, research_client.answer_clarification, answer, by, "answer")


async def _send_review(handle: WorkflowHandle, feedback: str, by: Actor) -> ReviewOutcome:
    return await _send_update(handle, research_client.review_plan, feedback, by, "feedback")


async def _send_update(handle: WorkflowHandle, update: research_client.Update, value: Any, by: Actor,
                       what: str) -> ReviewOutcome:
    """Send a validated update from ``by``; the workflow's validator's reason comes back as the error.

    An update waits for a worker to validate it, for as long as it takes; with none running (a
    deployment's workers down) the command says so, and what stopping means.
    """
    try:
        return await noticed(update(handle, value, by), (
            f"No worker has taken the {what} for {handle.id} yet; still waiting (is a worker running? "
            "`python worker.py`, with the same TEMPORAL_* settings). If you stop waiting with Ctrl-C, the "
            f"server may still hand it to the next worker: check `python starter.py status {handle.id}` "
            "before sending it again."))
    except WorkflowUpdateFailedError as error:
        raise CliError(f"{what.capitalize()} rejected: {failure_message(error.cause)}") from error
    except WorkflowUpdateRPCTimeoutOrCancelledError as error:  # Ctrl-C (the SDK's word for it) or the server's deadline
        task = asyncio.current_task()
        interrupted = task is not None and task.cancelling() > 0
        raise CliError(f"Stopped waiting: no worker has taken the {what} for {handle.id} yet. The server may still "
                       f"hand it to the next worker: check `python starter.py status {handle.id}` before sending it "
                       "again.", exit_code=130 if interrupted else 2) from error
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            # Updates to a closed run also answer NOT_FOUND: tell the two cases apart.
            ended = ended_label((await _describe(handle)).status) or "completed"
            raise CliError(f"Run {handle.id} has already ended ({ended}); it is not waiting for {what}.") from error
        raise CliError(f"Could not send the {what} to {handle.id}: {error.message}") from error
