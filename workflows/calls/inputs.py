"""Turns one raw workflow input into its contract, or a clear failure (shared by every workflow type).

The workflows receive their inputs undecoded (``RawValue``): when the SDK decodes a bad input
itself, the error fails the workflow *task*, which Temporal retries for ever while the run shows
Running. Decoding here instead ends such a run at once as Failed, with the offending fields named.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import ValidationError
from temporalio.common import RawValue
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError

from workflows.contracts.undecodable import Undecodable

INVALID_REQUEST = "InvalidRequest"
MAX_LISTED_ERRORS = 5
MAX_TEXT = 200
T = TypeVar("T")


def invalid_request(reason: str) -> ApplicationError:
    """The non-retryable failure a bad start input ends the run with."""
    return ApplicationError(f"Invalid request: {reason}"[:2000], type=INVALID_REQUEST, non_retryable=True)


def validation_summary(error: ValidationError) -> str:
    """pydantic's field paths and messages, short, without its documentation links."""
    lines = []
    for detail in error.errors(include_url=False)[:MAX_LISTED_ERRORS]:
        field = ".".join(str(part) for part in detail["loc"]) or "input"
        lines.append(f"{field}: {detail['msg'][:MAX_TEXT]}")
    more = error.error_count() - MAX_LISTED_ERRORS
    return "; ".join(lines) + (f"; and {more} more" if more > 0 else "")


def decode_input(raw: RawValue, model: type[T], converter: PayloadConverter) -> T:
    """One undecoded workflow input as ``model``; a bad one fails the run with the fields named,
    instead of failing its workflow task over and over (shared by every workflow type)."""
    try:
        value = converter.from_payloads([raw.payload], [model])[0]
    except ValidationError as error:
        raise invalid_request(validation_summary(error)) from None
    except Exception as error:  # unknown encoding, undecodable bytes, nesting too deep
        raise invalid_request(f"the input could not be decoded ({type(error).__name__}: "
                              f"{str(error)[:MAX_TEXT]})") from None
    if isinstance(value, Undecodable):  # the worker could not decode it (runtime/message_payloads.py)
        raise invalid_request(value.reason)
    if not isinstance(value, model):  # e.g. JSON null
        raise invalid_request(f"the input must be a JSON object, not {type(value).__name__}")
    return value
