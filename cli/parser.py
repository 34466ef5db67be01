"""The whole command line of ``starter.py``: every subcommand, its flags and its handler.

Each handler takes the parsed arguments and the settings cli/main.py loaded, and returns an exit
code (cli/main.py runs it). The web
servers' handlers come from the entry point (``ServerCommands``): the CLI imports nothing of
server/, and the web stack is imported only by the commands that serve.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, NoReturn

from cli.arguments import add_as_argument, duration, older_than, positive, since_duration, usd
from runtime.build_info import add_version_argument
from workflows.contracts.report_style import ReportStyle

if TYPE_CHECKING:
    from config.settings import Settings

Handler = Callable[[argparse.Namespace, "Settings"], Awaitable[int]]
Subcommands = argparse._SubParsersAction


@dataclass(frozen=True)
class ServerCommands:
    """``serve`` and ``codec-server``, handed in by starter.py (server/ is not the CLI's to import)."""

    serve: Handler
    codec_server: Handler


@dataclass(frozen=True)
class Command:
    """The handler ``name`` of ``cli.<module>``, imported only when its command runs.

    Each command module imports what its commands need (Temporal's SDK, pydantic, rich): built from
    these, the parser imports none of them, so ``--help``, ``--version`` and a usage error answer at
    once, and each command pays for its own imports only.
    """

    module: str
    name: str

    def load(self) -> Handler:
        """The handler, its module imported (cli/main.py imports it with the settings, before running it)."""
        handler: Handler = getattr(importlib.import_module(f"cli.{self.module}"), self.name)
        return handler

    async def __call__(self, args: argparse.Namespace, settings: Settings) -> int:
        return await self.load()(args, settings)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, exit code 2: the full usage is one ``--help`` away."""

    def error(self, message: str) -> NoReturn:
        print(f"Error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def build_parser(servers: ServerCommands) -> argparse.ArgumentParser:
    parser = _Parser(prog="starter.py", description="deerflow-temporal: durable deep research")
    add_version_argument(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_steering(sub)
    _add_fork(sub)
    _add_reading(sub)
    _add_history(sub)
    _add_servers(sub, servers)
    _add_operations(sub)
    _add_blobs(sub)
    _add_content(sub)
    return parser


def command_handlers(parser: argparse.ArgumentParser) -> dict[str, Handler]:
    """Each subcommand's handler, by name: the command server loads the served ones' modules ahead."""
    subcommands = next(action for action in parser._actions if isinstance(action, Subcommands))
    return {name: command.get_default("handler") for name, command in subcommands.choices.items()}


def _add_run(sub: Subcommands) -> None:
    """Start a research run: the question and every flag of its request."""
    run = sub.add_parser("run", help="start a research run and follow it")
    run.add_argument("question", nargs="?", help="the question; - reads it from stdin")
    run.add_argument("--question-file", metavar="FILE", help="read the question from this file (UTF-8)")
    run.add_argument("--auto-accept", action="store_true", help="accept the plan without review")
    run.add_argument("--report-style", choices=[style.value for style in ReportStyle])
    run.add_argument("--locale", help="report locale, e.g. en-US or zh-CN (default: detected)")
    run.add_argument("--max-steps", type=positive, help="at most this many plan steps (default 3)")
    run.add_argument("--max-plan-iterations", type=positive, help="planning rounds (default 1)")
    run.add_argument("--max-search-results", type=positive, help="results per search (default 3)")
    run.add_argument("--no-background", action="store_true", help="skip the background investigation")
    run.add_argument("--no-web", action="store_true",
                     help="research without the web: only --resource documents and MCP tools")
    run.add_argument("--deep-thinking", action="store_true", help="plan with the reasoning model")
    run.add_argument("--resource", action="append", default=[], metavar="PATH",
                     help="a document or folder (md, txt, pdf, html) to research; repeatable")
    run.add_argument("--parallel", action="store_true", help="run independent research steps concurrently")
    run.add_argument("--token-budget", type=positive, metavar="TOKENS",
                     help="pause for a decision before a step that would spend more (at most the operator's maximum)")
    run.add_argument("--cost-budget", type=usd, metavar="USD",
                     help="the same in USD, at the operator's model prices (DEERFLOW_MODEL_PRICES)")
    run.add_argument("--clarify", action="store_true", help="let the coordinator ask clarifying questions")
    run.add_argument("--review-timeout", metavar="DURATION", type=duration,
                     help="how long a review may wait, ISO 8601 (P7D, PT12H) or seconds (default P7D)")
    run.add_argument("--review-timeout-action", choices=["accept", "cancel", "report"],
                     help="what happens when the review deadline passes (default cancel)")
    run.add_argument("--no-wait", action="store_true", help="print the run ID and return at once")
    run.add_argument("-o", "--output", help="write the report to this file")
    run.add_argument("--id", help="workflow ID for the run (default: derived from the question)")
    run.add_argument("--force", action="store_true", help="reuse the --id of a run that has ended")
    run.add_argument("-v", "--verbose", action="store_true", help="print the event-to-display delay at the end")
    add_as_argument(run)
    run.set_defaults(handler=Command("research", "run"))


def _add_steering(sub: Subcommands) -> None:
    """Answer a run that waits for a person."""
    review = sub.add_parser("review", help="accept or edit the plan of a paused run, or accept every one waiting")
    review.add_argument("id", nargs="?")
    choice = review.add_mutually_exclusive_group(required=True)
    choice.add_argument("--accept", action="store_true")
    choice.add_argument("--edit", metavar="TEXT", help="what the planner should change")
    review.add_argument("--all-awaiting", action="store_true",
                        help="every run waiting for a plan review (narrowed by the filters below)")
    add_filters(review, since="with --all-awaiting: runs started within this long")
    review.add_argument("--dry-run", action="store_true", help="with --all-awaiting: count the runs, decide none")
    add_as_argument(review)
    review.set_defaults(handler=Command("bulk", "review"))

    answer = sub.add_parser("answer", help="answer the coordinator's clarifying question")
    answer.add_argument("id")
    answer.add_argument("text")
    add_as_argument(answer)
    answer.set_defaults(handler=Command("research", "answer"))

    budget = sub.add_parser("budget", help="decide about a run paused at its token or cost budget")
    budget.add_argument("id")
    decision = budget.add_mutually_exclusive_group()  # one of them, or --raise-usd (research.budget checks)
    decision.add_argument("--raise", dest="raise_to", type=positive, metavar="TOKENS",
                          help="a new, higher token budget (up to the operator's maximum)")
    budget.add_argument("--raise-usd", type=usd, metavar="USD",
                        help="a new, higher cost budget (up to the operator's maximum); with or without --raise")
    decision.add_argument("--finish", action="store_true", help="no more steps: report from what was found")
    decision.add_argument("--cancel", action="store_true", help="end the run without a report")
    add_as_argument(budget)
    budget.set_defaults(handler=Command("research", "budget"))


def _add_fork(sub: Subcommands) -> None:
    """A new run from a point of another, reusing what it found before that point."""
    fork = sub.add_parser("fork", help="a new run from a run's plan, step N or report, reusing (not paying again "
                                       "for) what the run found before that point")
    fork.add_argument("id", help="the run to fork")
    fork.add_argument("--from", dest="stage", nargs="+", required=True, metavar="STAGE",
                      help="plan (plan again from its background investigation), step N (run steps N onwards "
                           "again) or report (write the report again)")
    fork.add_argument("--report-style", choices=[style.value for style in ReportStyle])
    fork.add_argument("--locale", help="the fork's report locale, e.g. en-US or zh-CN (default: the run's)")
    fork.add_argument("--edit", metavar="TEXT",
                      help="plan: feedback on the run's plan, as a review's edit; step N: step N's new description; "
                           "report: an instruction to the reporter")
    fork.add_argument("--fork-id", help="workflow ID for the fork (default: the run's, with -fork-…)")
    fork.add_argument("--no-wait", action="store_true", help="print the fork's ID and return at once")
    fork.add_argument("-o", "--output", help="write the fork's report to this file")
    fork.add_argument("-v", "--verbose", action="store_true", help="print the event-to-display delay at the end")
    add_as_argument(fork)
    fork.set_defaults(handler=Command("fork", "fork"))


def _add_reading(sub: Subcommands) -> None:
    """Follow, read, list and cancel runs."""
    watch = sub.add_parser("watch", help="follow a run live (a panel on a terminal, lines otherwise)")
    watch.add_argument("id")
    watch.add_argument("--plain", action="store_true", help="print changes as lines even on a terminal")
    watch.add_argument("--stats", action="store_true", help="print the event-to-display delay at the end")
    watch.set_defaults(handler=Command("operate", "watch_run"))

    status = sub.add_parser("status", help="show a run's phase, plan and progress")
    status.add_argument("id")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=Command("runs", "status"))

    report = sub.add_parser("report", help="print the report of a finished run")
    report.add_argument("id")
    report.add_argument("-o", "--output", help="write the report to this file")
    report.set_defaults(handler=Command("runs", "report"))

    listing = sub.add_parser("list", help="list research runs, newest first, a page at a time")
    listing.add_argument("--running", action="store_true", help="only runs still in progress")
    listing.add_argument("--awaiting-review", action="store_true", help="only runs waiting for a plan review")
    add_filters(listing, since="runs started within this long: 30m, 12h, 7d, 2w")
    listing.add_argument("--limit", type=positive, default=50, help="runs a page (default 50, at most 500)")
    listing.add_argument("--page", metavar="TOKEN", help="the next page, as the previous page said")
    listing.set_defaults(handler=Command("listing", "list_runs"))

    spend = sub.add_parser("costs", help="what the runs started lately spent, by model and by who started them")
    add_filters(spend, since="runs started within this long: 30m, 12h, 7d (default), 2w")
    spend.set_defaults(handler=Command("costs", "costs"), since=since_duration("7d"))

    cancel = sub.add_parser("cancel", help="cancel a run, or with --query every running run it matches")
    cancel.add_argument("id", nargs="?")
    add_filters(cancel, since="without an ID: the running runs started within this long")
    cancel.add_argument("--dry-run", action="store_true", help="without an ID: count the runs, cancel none")
    add_as_argument(cancel)
    cancel.set_defaults(handler=Command("bulk", "cancel"))


def add_filters(parser: argparse.ArgumentParser, since: str) -> None:
    """The filters of research runs (runtime/run_listing.py RunFilter), as flags."""
    parser.add_argument("--phase", help="only runs in this phase: awaiting_review, researching, completed, …")
    parser.add_argument("--awaiting", metavar="WHAT", help="only runs waiting for plan_feedback, "
                                                           "clarification_answer or budget")
    parser.add_argument("--started-by", metavar="NAME", help="only runs NAME started ('alice', or 'alice (api)')")
    parser.add_argument("--question", metavar="WORDS", help="only runs whose question holds all these words")
    parser.add_argument("--since", type=since_duration, help=since)
    parser.add_argument("--older-than", type=since_duration, metavar="AGE", help="only runs started longer ago: 2d")
    parser.add_argument("--query", help="a visibility query of your own, ANDed with the rest "
                                        "(e.g. \"DeerFlowPhase = 'awaiting_review'\")")


def _add_history(sub: Subcommands) -> None:
    """A run's event history: export, inspect and replay."""
    exported = sub.add_parser("history", help="export a run's event history as JSON (replayable)")
    exported.add_argument("id")
    exported.add_argument("-o", "--output", help="write it to this file (default: standard output)")
    exported.add_argument("--as-test", nargs="?", const="", metavar="NAME",
                          help="write it into tests/histories/NAME.json (default: the run's ID) for the replay "
                               "tests: every payload readable, secrets scrubbed; run from the checkout")
    exported.add_argument("--raw", action="store_true",
                         help="as the server holds it, blob-store references and all (replays only where the "
                              "store is reachable); default: every reference resolved, so the file replays anywhere")
    exported.set_defaults(handler=Command("history", "history"))

    inspect = sub.add_parser("inspect", help="what a run did, call by call: prompts, replies, searches, pages, "
                                             "attempts, tokens and cost, who decided what")
    inspect.add_argument("id", nargs="?", help="the run (with --file: the name to give the file's run)")
    inspect.add_argument("--file", help="a history exported with `history` or the Web UI, instead of the server")
    shown = inspect.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="the same as data (one JSON object)")
    shown.add_argument("--html", metavar="FILE", help="write it as a self-contained page for a bug report")
    shown.add_argument("--full", action="store_true", help="show every text whole (default: the first 1,500 "
                                                           "characters of each)")
    inspect.set_defaults(handler=Command("inspection", "inspect_command"))

    replay = sub.add_parser("replay", help="replay a run's history, or every closed run's, against this code "
                                           "(the check before a deploy)")
    replay.add_argument("id", nargs="?")
    replay.add_argument("--file", help="a history exported with `history` or the Web UI")
    replay.add_argument("--since", type=since_duration, metavar="AGE",
                        help="every run closed within this long that the server keeps: 30m, 12h, 7d, 2w; "
                             "exit 1 if any diverges, 2 if any cannot be read")
    replay.add_argument("--query", metavar="VISIBILITY_QUERY",
                        help="only the runs this visibility query selects (with or without --since), "
                             "e.g. \"TaskQueue = 'deep-research'\"")
    replay.add_argument("--open", action="store_true", help="with --since/--query: the runs still open too")
    replay.add_argument("--concurrency", type=positive, default=4, metavar="N",
                        help="with --since/--query: histories fetched at once (default 4); memory grows with it")
    replay.set_defaults(handler=Command("history", "replay"))


def _add_servers(sub: Subcommands, servers: ServerCommands) -> None:
    """Our web servers, on uvicorn."""
    serve = sub.add_parser("serve", help="the web front end: our research page and DeerFlow's API")
    serve.add_argument("--host", default="127.0.0.1", help="beyond loopback needs DEERFLOW_WEB_TOKEN")
    serve.add_argument("--port", type=positive, default=8000)
    add_version_argument(serve)
    serve.set_defaults(handler=servers.serve)

    codec = sub.add_parser("codec-server", help="decode payloads (blob references, encryption) for the Web UI and CLI")
    codec.add_argument("--host", default="127.0.0.1", help="beyond loopback needs DEERFLOW_CODEC_TOKEN")
    codec.add_argument("--port", type=positive, default=8081)
    codec.add_argument("--no-token-on-private-network", action="store_true",
                       help="listen beyond loopback without DEERFLOW_CODEC_TOKEN: only where the port is "
                            "published on the host's loopback alone (as docker-compose.yml does)")
    add_version_argument(codec)
    codec.set_defaults(handler=servers.codec_server)


def _add_operations(sub: Subcommands) -> None:
    """The configuration and the embedded dev server."""
    config = sub.add_parser("config", help="print the effective configuration and where each value came from")
    config.set_defaults(handler=Command("config_view", "show"))

    down = sub.add_parser("down", help="stop the embedded dev server and worker")
    down.set_defaults(handler=Command("operate", "down"))


def _add_content(sub: Subcommands) -> None:
    """A finished run's report as something else: a grade, a deck, a podcast."""
    evaluate = sub.add_parser("evaluate", help="grade a finished run's report (DeerFlow's metrics; --llm: the model's)")
    evaluate.add_argument("id")
    evaluate.add_argument("--style", choices=[s.value for s in ReportStyle], default=ReportStyle.ACADEMIC.value,
                          help="the report style to judge it against (default: academic, as runs)")
    evaluate.add_argument("--llm", action="store_true", help="also ask the model to judge it")
    add_as_argument(evaluate, "having started it (starter.py costs)")
    evaluate.set_defaults(handler=Command("content", "evaluate_command"))

    slides = sub.add_parser("slides", help="a finished run's report as a PowerPoint deck")
    slides.add_argument("id")
    slides.add_argument("-o", "--output", required=True, help="the .pptx file to write")
    add_as_argument(slides, "having started it (starter.py costs)")
    slides.set_defaults(handler=Command("content", "slides_command"))

    podcast = sub.add_parser("podcast", help="a finished run's report as a two-voice podcast (MP3)")
    podcast.add_argument("id")
    podcast.add_argument("-o", "--output", required=True, help="the .mp3 file to write")
    add_as_argument(podcast, "having started it (starter.py costs)")
    podcast.set_defaults(handler=Command("content", "podcast_command"))


def _add_blobs(sub: Subcommands) -> None:
    """The large-payload store (runtime/blob_gc.py)."""
    store = sub.add_parser("blobs", help="the large-payload store: `blobs gc` deletes blobs of runs gone")
    actions = store.add_subparsers(dest="blobs_command", required=True, metavar="gc")
    gc = actions.add_parser("gc", help="delete the blobs of runs the server no longer keeps")
    gc.add_argument("--older-than", type=older_than, default=timedelta(days=7), metavar="DAYS",
                    help="only blobs older than this many days (default 7, at least 1 hour)")
    gc.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    gc.set_defaults(handler=Command("blobs", "blobs_gc"))
