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
from typing import TYPE_CHECKING, NoReturn

from cli import main as cli_main
from cli.parser import ServerCommands
from cli.parser import build_parser as build_cli_parser
from runtime.shutdown import exit_now

if TYPE_CHECKING:
    from config.settings import Settings


async def serve_command(args: argparse.Namespace, settings: Settings) -> int:
    """``serve``. Its web stack (Starlette, uvicorn) is imported here, so that no other command, and no
    recovery from a dead worker (which every command can do), waits for it."""
    from server.serve import serve

    return await serve(args, settings)


async def codec_command(args: argparse.Namespace, settings: Settings) -> int:
    """``codec-server``, with the web stack imported here for the same reason as ``serve``."""
    from server.serve import serve_codec

    return await serve_codec(args, settings)


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser (cli/parser.py) with our web servers as its ``serve`` and ``codec-server``."""
    return build_cli_parser(ServerCommands(serve=serve_command, codec_server=codec_command))


def main(argv: list[str] | None = None) -> int:
    return cli_main.main(build_parser(), argv)


def run() -> NoReturn:
    """The ``deerflow`` console script and ``python starter.py``."""
    exit_now(main())


if __name__ == "__main__":
    run()
