"""The command line's argument types and shared flags: plain Python, imported by ``--help`` too.

They live apart from the command modules, which import Temporal's SDK, pydantic and rich, so that
building the parser (``--help``, ``--version``, a usage error) imports none of those.
"""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
# Below this a blob written by a run in flight, not yet named by its history, could go.
MIN_BLOB_MARGIN = timedelta(hours=1)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from error
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def usd(text: str) -> float:
    """An amount in USD above zero: ``0.50``, ``12``."""
    try:
        value = float(text.removeprefix("$"))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount in USD") from error
    if not 0 < value < float("inf"):  # nan and inf too: a budget is a finite amount
        raise argparse.ArgumentTypeError(f"{text} is not a finite amount above 0")
    return value


def duration(text: str) -> timedelta:
    """Seconds (``300``, ``1.5``) or ISO 8601 (``PT12H``, ``P3D``), as the README and ``--help`` promise.

    pydantic reads ISO 8601; it is imported only when a duration is given that is not in seconds."""
    if re.fullmatch(r"\s*\d+(\.\d+)?\s*", text):
        value = _seconds(text)
    else:
        from pydantic import TypeAdapter, ValidationError

        try:
            value = TypeAdapter(timedelta).validate_python(text.strip())
        except (ValidationError, OverflowError) as error:
            raise _not_a_duration(text) from error
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    return value


def _seconds(text: str) -> timedelta:
    try:
        return timedelta(seconds=float(text))
    except OverflowError as error:
        raise _not_a_duration(text) from error


def _not_a_duration(text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{text!r} is not a duration: give seconds (300) or ISO 8601 (PT12H, P3D)")


def since_duration(value: str) -> timedelta:
    """``--since``: a number and a unit, ``30m``, ``12h``, ``7d`` or ``2w``."""
    match = re.fullmatch(r"\s*(\d+)\s*([mhdw])\s*", value)
    if not match or int(match[1]) == 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration like 30m, 12h, 7d or 2w")
    return timedelta(**{_UNITS[match[2]]: int(match[1])})


def older_than(text: str) -> timedelta:
    """``--older-than DAYS``: a number of days (``7``, ``0.5``), at least an hour."""
    try:
        margin = timedelta(days=float(text))
    except (ValueError, OverflowError) as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from error
    if margin < MIN_BLOB_MARGIN:
        raise argparse.ArgumentTypeError(f"{text!r} days is under the one-hour safety margin")
    return margin


def add_as_argument(parser: argparse.ArgumentParser, recorded_as: str = "having decided") -> None:
    """``--as NAME``: who the command says decided, or started what it starts (cli/actor.py)."""
    parser.add_argument("--as", dest="as_name", metavar="NAME",
                        help=f"the name recorded as {recorded_as} (default: the OS user)")
