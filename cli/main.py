"""Runs one command line: parse, load the settings, run the handler with them, and turn every error
a user can act on into one line and an exit code (never a traceback).

The CLI's entry point: the settings are loaded here, once, and handed to the command; nothing
below loads them again. Parsing imports nothing beyond the parser (``--help`` and ``--version``
answer from it); the settings, asyncio and the command's own module come after, and the errors'
classes only once a command has failed.
"""

from __future__ import annotations

import argparse
import os
import sys

from cli.parser import Command, Handler
from runtime.process_start import collection_paused, skip_pydantic_plugin_discovery
from runtime.text_streams import replace_lone_surrogates_on_output

# What a Ctrl-C hint says of the run the command was about: one it started goes on (``list`` shows it
# until it is named); one it follows, named by ``id``, goes on; one it decides may have had the
# decision before the Ctrl-C. A command about no run (``list``, ``costs``, ``down``) names none.
STARTS_A_RUN = frozenset({"run", "fork"})  # fork's ``id`` is its source, not the run it starts
FOLLOWS_A_RUN = frozenset({"watch", "status"})
DECIDES_FOR_A_RUN = frozenset({"review", "answer", "budget", "cancel"})


class RunInterrupted(Exception):
    """Ctrl-C while ``run`` follows the run it started: the run goes on, and the hint names it."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


def main(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    replace_lone_surrogates_on_output()  # before anything prints
    args = argparse.Namespace()  # filled by parsing; the Ctrl-C hint reads the run ID from it
    try:
        parser.parse_args(argv, namespace=args)  # inside the try: `--help | head` closes the pipe too
        code = _run(args)
        sys.stdout.flush()  # inside the try: a closed pipe often shows only when the buffer is flushed
        return code
    except BrokenPipeError:
        # The reader left (``| head``): that is how it says it has read enough. Later writes and the
        # final flush go nowhere instead of raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return _interrupted(args)
    except RunInterrupted as interrupted:
        return _interrupted(args, interrupted.run_id)
    except Exception as error:
        return _failed(error)


def _run(args: argparse.Namespace) -> int:
    skip_pydantic_plugin_discovery()
    with collection_paused():  # the imports: most of a command's CPU (runtime/process_start.py)
        import asyncio

        from config.settings import load_settings

        handler: Handler = args.handler.load() if isinstance(args.handler, Command) else args.handler
        _carriable_arguments(args)
        settings = load_settings()  # before any command starts a server or a worker: a bad value stops here
    return asyncio.run(handler(args, settings))


# The arguments that name local files: kept as given, so a name of bytes that are not UTF-8 still opens.
FILE_ARGUMENTS = frozenset({"question_file", "output", "file", "html"})


def _carriable_arguments(args: argparse.Namespace) -> None:
    """Every other argument with its lone surrogates as U+FFFD. Python decodes an argument of bytes
    that are not UTF-8 with ``surrogateescape``, and a question holding one was refused as "not a valid
    string", an edit or an answer failed where it became a payload (UTF-8 cannot encode it)."""
    from workflows.text.untrusted_text import without_lone_surrogates

    for name, value in vars(args).items():
        if name in FILE_ARGUMENTS:
            continue
        if isinstance(value, str):
            setattr(args, name, without_lone_surrogates(value))
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            setattr(args, name, [without_lone_surrogates(item) for item in value])


def _failed(error: Exception) -> int:
    """The exit code of a command that raised ``error``, reported in one line when a user can act on
    it; anything else is a bug, raised again for its traceback."""
    from temporalio.service import RPCError

    from config.settings import ConfigError
    from runtime.connection import TemporalConnectionError
    from runtime.embedded import EmbeddedError
    from runtime.encryption import EncryptionConfigError
    from runtime.front_door import CliError

    if isinstance(error, ConfigError):  # one line per bad value, not a traceback
        for problem in error.problems:
            print(f"Error: {problem}", file=sys.stderr)
        return 2
    if isinstance(error, CliError | EmbeddedError | TemporalConnectionError | EncryptionConfigError):
        print(f"Error: {error}", file=sys.stderr)
        return error.exit_code if isinstance(error, CliError) else 2
    if isinstance(error, RPCError):
        print(f"Error: Temporal answered: {error.message}", file=sys.stderr)
        return 2
    raise error


def _interrupted(args: argparse.Namespace, run_id: str | None = None) -> int:
    """Ctrl-C: exit 130, and what became of the run the command was about."""
    command, named = getattr(args, "command", None), getattr(args, "id", None)
    if run_id or (command in FOLLOWS_A_RUN and named):
        hint = f" The run goes on in Temporal; `python starter.py status {run_id or named}` shows it."
    elif command in DECIDES_FOR_A_RUN and named:
        hint = f" The run may have had the decision already; `python starter.py status {named}` shows it."
    elif command in STARTS_A_RUN:  # interrupted before it could name the run it started
        hint = " The run goes on in Temporal; `python starter.py list` shows it."
    else:
        hint = ""
    print(f"\nInterrupted.{hint}", file=sys.stderr)
    return 130
