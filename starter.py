"""The front door: start research runs, review plans and operate runs from the command line.

    python starter.py run "How do solid-state batteries compare with lithium-ion?"
    python starter.py run - < question.txt      # or --question-file question.txt
    python starter.py review ID --accept | --edit "add a step on costs"
    python starter.py answer ID "the EU, next five years"   # a clarifying question
    python starter.py watch ID      # follow a run live
    python starter.py status ID | report ID [-o FILE] | list | cancel ID
    python starter.py history ID [-o FILE.json] | replay ID | replay --file FILE.json
    python starter.py serve         # the web front end on http://127.0.0.1:8000/
    python starter.py blobs gc [--dry-run] [--older-than DAYS]   # blobs of runs the server no longer keeps
    python starter.py codec-server  # decodes payloads for the Web UI and the temporal CLI
    python starter.py evaluate ID [--llm]   # grade a finished run's report (DeerFlow's metrics)
    python starter.py slides ID -o deck.pptx | podcast ID -o talk.mp3   # the report as a deck, a podcast
    python starter.py down          # stop the embedded dev server and worker
    python starter.py config        # the effective configuration, where each value came from; checks it
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import NoReturn

from pydantic import TypeAdapter, ValidationError
from temporalio.service import RPCError

from cli import blobs, commands, config_view, content
from config.settings import ConfigError, load_settings
from runtime.build_info import add_version_argument
from runtime.connection import TemporalConnectionError
from runtime.embedded import EmbeddedError
from runtime.encryption import EncryptionConfigError
from runtime.front_door import CliError
from runtime.shutdown import exit_now
from workflows.models import ReportStyle


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from error
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _duration(text: str) -> timedelta:
    """Seconds (``300``, ``1.5``) or ISO 8601 (``PT12H``, ``P3D``), as the README and ``--help`` promise."""
    try:
        value = (timedelta(seconds=float(text)) if re.fullmatch(r"\s*\d+(\.\d+)?\s*", text)
                 else TypeAdapter(timedelta).validate_python(text.strip()))
    except (ValidationError, OverflowError) as error:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: give seconds (300) or ISO 8601 (PT12H, P3D)") from error
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return value


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, exit code 2: the full usage is one ``--help`` away."""

    def error(self, message: str) -> NoReturn:
        print(f"Error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


async def serve_command(args: argparse.Namespace) -> int:
    """``serve``. Its web stack (Starlette, uvicorn) is imported here, so that no other command, and no
    recovery from a dead worker (which every command can do), waits for it."""
    from server.serve import serve

    return await serve(args)


async def codec_command(args: argparse.Namespace) -> int:
    """``codec-server``, with the web stack imported here for the same reason as ``serve``."""
    from server.serve import serve_codec

    return await serve_codec(args)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="starter.py", description="deerflow-temporal: durable deep research")
    add_version_argument(parser)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start a research run and follow it")
    run.add_argument("question", nargs="?", help="the question; - reads it from stdin")
    run.add_argument("--question-file", metavar="FILE", help="read the question from this file (UTF-8)")
    run.add_argument("--auto-accept", action="store_true", help="accept the plan without review")
    run.add_argument("--report-style", choices=[style.value for style in ReportStyle])
    run.add_argument("--locale", help="report locale, e.g. en-US or zh-CN (default: detected)")
    run.add_argument("--max-steps", type=_positive, help="at most this many plan steps (default 3)")
    run.add_argument("--max-plan-iterations", type=_positive, help="planning rounds (default 1)")
    run.add_argument("--max-search-results", type=_positive, help="results per search (default 3)")
    run.add_argument("--no-background", action="store_true", help="skip the background investigation")
    run.add_argument("--no-web", action="store_true",
                     help="research without the web: only --resource documents and MCP tools")
    run.add_argument("--deep-thinking", action="store_true", help="plan with the reasoning model")
    run.add_argument("--resource", action="append", default=[], metavar="PATH",
                     help="a document or folder (md, txt, pdf, html) to research; repeatable")
    run.add_argument("--parallel", action="store_true", help="run independent research steps concurrently")
    run.add_argument("--clarify", action="store_true", help="let the coordinator ask clarifying questions")
    run.add_argument("--review-timeout", metavar="DURATION", type=_duration,
                     help="how long a review may wait, ISO 8601 (P7D, PT12H) or seconds (default P7D)")
    run.add_argument("--review-timeout-action", choices=["accept", "cancel", "report"],
                     help="what happens when the review deadline passes (default cancel)")
    run.add_argument("--no-wait", action="store_true", help="print the run ID and return at once")
    run.add_argument("-o", "--output", help="write the report to this file")
    run.add_argument("--id", help="workflow ID for the run (default: derived from the question)")
    run.add_argument("--force", action="store_true", help="reuse the --id of a run that has ended")
    run.add_argument("-v", "--verbose", action="store_true", help="print the event-to-display delay at the end")
    run.set_defaults(handler=commands.run)

    review = sub.add_parser("review", help="accept or edit the plan of a paused run")
    review.add_argument("id")
    choice = review.add_mutually_exclusive_group(required=True)
    choice.add_argument("--accept", action="store_true")
    choice.add_argument("--edit", metavar="TEXT", help="what the planner should change")
    review.set_defaults(handler=commands.review)

    answer = sub.add_parser("answer", help="answer the coordinator's clarifying question")
    answer.add_argument("id")
    answer.add_argument("text")
    answer.set_defaults(handler=commands.answer)

    watch = sub.add_parser("watch", help="follow a run live (a panel on a terminal, lines otherwise)")
    watch.add_argument("id")
    watch.add_argument("--plain", action="store_true", help="print changes as lines even on a terminal")
    watch.add_argument("--stats", action="store_true", help="print the event-to-display delay at the end")
    watch.set_defaults(handler=commands.watch_run)

    status = sub.add_parser("status", help="show a run's phase, plan and progress")
    status.add_argument("id")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=commands.status)

    report = sub.add_parser("report", help="print the report of a finished run")
    report.add_argument("id")
    report.add_argument("-o", "--output", help="write the report to this file")
    report.set_defaults(handler=commands.report)

    runs = sub.add_parser("list", help="list research runs")
    runs.add_argument("--running", action="store_true", help="only runs still in progress")
    runs.add_argument("--awaiting-review", action="store_true", help="only runs waiting for a plan review")
    runs.add_argument("--limit", type=_positive, default=50)
    runs.set_defaults(handler=commands.list_runs)

    cancel = sub.add_parser("cancel", help="cancel a run")
    cancel.add_argument("id")
    cancel.set_defaults(handler=commands.cancel)

    history = sub.add_parser("history", help="export a run's event history as JSON (replayable)")
    history.add_argument("id")
    history.add_argument("-o", "--output", help="write it to this file (default: standard output)")
    history.add_argument("--raw", action="store_true",
                         help="as the server holds it, blob-store references and all (replays only where the "
                              "store is reachable); default: every reference resolved, so the file replays anywhere")
    history.set_defaults(handler=commands.history)

    replay = sub.add_parser("replay", help="replay a run's history against this code")
    replay.add_argument("id", nargs="?")
    replay.add_argument("--file", help="a history exported with `history` or the Web UI")
    replay.set_defaults(handler=commands.replay)

    serve = sub.add_parser("serve", help="the web front end: our research page and DeerFlow's API")
    serve.add_argument("--host", default="127.0.0.1", help="beyond loopback needs DEERFLOW_WEB_TOKEN")
    serve.add_argument("--port", type=_positive, default=8000)
    add_version_argument(serve)
    serve.set_defaults(handler=serve_command)

    codec = sub.add_parser("codec-server", help="decode payloads (blob references, encryption) for the Web UI and CLI")
    codec.add_argument("--host", default="127.0.0.1", help="beyond loopback needs DEERFLOW_CODEC_TOKEN")
    codec.add_argument("--port", type=_positive, default=8081)
    codec.add_argument("--no-token-on-private-network", action="store_true",
                       help="listen beyond loopback without DEERFLOW_CODEC_TOKEN: only where the port is "
                            "published on the host's loopback alone (as docker-compose.yml does)")
    add_version_argument(codec)
    codec.set_defaults(handler=codec_command)

    config = sub.add_parser("config", help="print the effective configuration and where each value came from")
    config.set_defaults(handler=config_view.show)

    down = sub.add_parser("down", help="stop the embedded dev server and worker")
    down.set_defaults(handler=commands.down)

    blobs.add_parser(sub)
    content.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argparse.Namespace()  # filled by parsing; the Ctrl-C hint reads the run ID from it
    try:
        build_parser().parse_args(argv, namespace=args)  # inside the try: `--help | head` closes the pipe too
        handler: Callable[[argparse.Namespace], Awaitable[int]] = args.handler
        load_settings()  # checked before any command starts a server or a worker: a bad value stops here
        code = asyncio.run(handler(args))
        sys.stdout.flush()  # inside the try: a closed pipe often shows only when the buffer is flushed
        return code
    except ConfigError as error:  # one line per bad value, not a traceback
        for problem in error.problems:
            print(f"Error: {problem}", file=sys.stderr)
        return 2
    except (CliError, EmbeddedError, TemporalConnectionError, EncryptionConfigError) as error:
        print(f"Error: {error}", file=sys.stderr)
        return error.exit_code if isinstance(error, CliError) else 2
    except RPCError as error:
        print(f"Error: Temporal answered: {error.message}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader left (``| head``): that is how it says it has read enough. Later writes and the
        # final flush go nowhere instead of raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        run_id = getattr(args, "id", None)
        hint = f"`python starter.py status {run_id}` shows it" if run_id else "`python starter.py list` shows it"
        print(f"\nInterrupted. The run goes on in Temporal; {hint}.", file=sys.stderr)
        return 130


def run() -> NoReturn:
    """The ``deerflow`` console script and ``python starter.py``."""
    exit_now(main())


if __name__ == "__main__":
    run()
