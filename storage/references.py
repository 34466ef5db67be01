"""Refusing payload references that no component sharing the store could have written.

Whoever may start a run or send it a signal can hand the worker a hand-made external-storage
reference instead of a payload. The SDK resolves references before workflow code runs, so a
driver's *retryable* error there would leave the run in a workflow-task retry loop for good. A
reference that is malformed, points outside this store, or names a blob a present store never
wrote can only have come from outside: each driver refuses it with the non-retryable error below,
which the SDK turns into a failed run (or a failed activity) at once.
"""

from __future__ import annotations

import re

from temporalio.exceptions import ApplicationError

HASH_ALGORITHM = "sha256"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(value: object) -> bool:
    """A lower-case SHA-256 hex digest, the only digest our stores name blobs by."""
    return isinstance(value, str) and SHA256_HEX.fullmatch(value) is not None


def invalid_reference(message: str) -> ApplicationError:
    return ApplicationError(message, type="InvalidPayloadReference", non_retryable=True)
