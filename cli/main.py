"""Runs one command line: parse, load the settings, run the handler with them, and turn every error
a user can act on into one line and an exit code (never a traceback).

The CLI's entry point: the settings are loaded here, once, and handed to the command; nothing
below loads them again."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from temporalio.service import RPCError

from cli.parser import Handler
from cli.research import RunInterrupted
from config.settings import ConfigError, load_settings
from runtime.connection import TemporalConnectionError
from runtime.embedded import EmbeddedError
from runtime.encryption import EncryptionConfigError
from runtime.front_door import CliError


def main(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    args = argparse.Namespace()  # filled by parsing; the Ctrl-C hint reads the run ID from it
    try:
        parser.parse_args(argv, namespace=args)  # inside the try: `--help | head` closes the pipe too
        handler: Handler = args.handler
        settings = load_settings()  # before any command starts a server or a worker: a bad value stops here
        code = asyncio.run(handler(args, settings))
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
    except RunInterrupted as interrupted:
        return _interrupted(interrupted.run_id)
    except KeyboardInterrupt:
        return _interrupted(getattr(args, "id", None))


def _interrupted(run_id: str | None) -> int:
    hint = f"`python starter.py status {run_id}` shows it" if run_id else "`python starter.py list` shows it"
    print(f"\nInterrupted. The run goes on in Temporal; {hint}.", file=sys.stderr)
    return 130
