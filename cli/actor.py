"""Who the CLI says decided: the OS user running it, or the name given with ``--as``.

The workflow records it with each review, answer and cancel (workflows/contracts/decisions.py). The CLI
vouches for nothing more than the OS account; ``--as`` is for people sharing one (a bastion host).
"""

from __future__ import annotations

import argparse
import getpass
import os

from pydantic import ValidationError

from runtime.front_door import CliError
from workflows.contracts.decisions import Actor, Via


def cli_actor(args: argparse.Namespace) -> Actor:
    name = getattr(args, "as_name", None) or _os_user()
    try:
        return Actor(name=name, via=Via.CLI)
    except ValidationError as error:
        raise CliError(f"--as {name!r} is not a usable name: 1 to 64 printable characters") from error


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER (a bare container)
        return f"uid {os.getuid()}"
