"""The errors the sandbox raises: it could not (or will not) run the code at all."""

from __future__ import annotations

import errno

from temporalio.exceptions import ApplicationError

SANDBOX_ERROR = "SandboxError"
# What a worker without the sandbox's privileges meets: causes that last as long as the worker.
LASTING_ERRNOS = frozenset({errno.EPERM, errno.EACCES})


def sandbox_error(message: str, non_retryable: bool = False) -> ApplicationError:
    """The sandbox itself failed (not the code): an activity error, retried unless told not to."""
    return ApplicationError(message, type=SANDBOX_ERROR, non_retryable=non_retryable)


class SandboxStartError(ApplicationError):
    """The sandbox could not be set up for the code; ``lasting``: the cause lasts as long as the
    worker (a missing privilege, a misowned directory), not a shortage that may pass (ENOMEM, EAGAIN).

    The worker's probe keeps a lasting refusal and probes again after any other (sandbox/activity.py).
    Retried like any ``SandboxError``.
    """

    def __init__(self, message: str, *, lasting: bool) -> None:
        super().__init__(message, type=SANDBOX_ERROR)
        self.lasting = lasting
