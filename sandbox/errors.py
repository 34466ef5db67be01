"""The one error the sandbox raises: it could not (or will not) run the code at all."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

SANDBOX_ERROR = "SandboxError"


def sandbox_error(message: str, non_retryable: bool = False) -> ApplicationError:
    """The sandbox itself failed (not the code): an activity error, retried unless told not to."""
    return ApplicationError(message, type=SANDBOX_ERROR, non_retryable=non_retryable)
