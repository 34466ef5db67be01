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

import sys
from typing import TYPE_CHECKING, NoReturn

from cli.command_client import served

if TYPE_CHECKING:
    import argparse

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
    from cli.parser import ServerCommands
    from cli.parser import build_parser as build_cli_parser

    return build_cli_parser(ServerCommands(serve=serve_command, codec_server=codec_command))


def main(argv: list[str] | None = None) -> int:
    from cli import main as cli_main

    return cli_main.main(build_parser(), argv)


def command_server(path: str) -> None:
    """The checkout's command server on ``path`` (cli/command_server.py), started by a command that
    found none (cli/command_client.py)."""
    from cli.command_server import main as serve_commands

    serve_commands(path, build_parser)


def run() -> NoReturn:
    """The ``deerflow`` console script and ``python starter.py``: a short command goes to the command
    server when one runs (cli/command_client.py), and runs here otherwise. Until then nothing but the
    standard library is imported, for that path is the one a served command waits on."""
    code = served(sys.argv[1:])
    if code is None:
        code = main()
    from runtime.shutdown import exit_now

    exit_now(code)


if __name__ == "__main__":
    run()
