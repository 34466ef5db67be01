"""The ``python_repl_tool`` activity: the coder's Python, contained or refused.

DeerFlow runs the coder's code inside the server process, with the server's secrets, network and
files. Here every call gets a fresh interpreter (``sandbox/bootstrap.py``, ``sandbox/runner.py``),
and a worker that cannot contain it refuses instead of running it weaker.

Modes (``DEERFLOW_SANDBOX_MODE``)
---------------------------------
``isolated`` (the default): namespaces, a chroot, a pool uid and a disk cap (see bootstrap.py).
    It needs a root worker with SYS_ADMIN, SYS_CHROOT, SETUID, SETGID and KILL: docker-compose's
    ``sandbox`` service, or root on a development machine. The probe (one trivial run, at worker
    start) decides: contained, the answer is kept. Refused for a lasting cause (a privilege the
    worker lacks: EPERM or EACCES, or a probe that ran uncontained), every call fails with a
    non-retryable ``SandboxError`` naming the failing step and errno. Any other failure (ENOMEM,
    EAGAIN, every uid busy, ...) may pass: that call fails retryable and the next one probes again.
    Nothing runs uncontained by accident.
``plain``: the operator's explicit consent to run model-written code *uncontained*, as the
    worker's user, with only rlimits, a scrubbed environment and process-group kills. The code
    can read the worker's files and ``/proc/<worker>/environ`` and reach the network. The worker
    says so loudly at start. Never for a deployment others can send requests to.

The former ``unprivileged`` mode (a uid switch without namespaces) is gone: it could not keep the
code off the network, ``/tmp`` or the blob store.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from temporalio import activity
from temporalio.exceptions import ApplicationError

from config.settings import Settings
from runtime.heartbeat import heartbeating
from sandbox.errors import SandboxStartError, sandbox_error
from sandbox.runner import ISOLATED, PLAIN, SandboxLimits, clamp_timeout, execute
from workflows.contracts.tool_activities import PythonRequest, PythonResult

logger = logging.getLogger(__name__)

MODE_ENV = "DEERFLOW_SANDBOX_MODE"
REFUSED = "refused"
# The probe proves containment, not just a start: a pool uid, and PID 1 of a fresh PID namespace.
_PROBE_CODE = "import os\nprint(os.getuid(), os.getpid())\n"
_HOW_TO_CONTAIN = (
    "Run python_repl_tool on a sandbox worker (docker-compose's `sandbox` service: root in its container "
    "with SYS_ADMIN, SYS_CHROOT, SETUID, SETGID and KILL), or set DEERFLOW_SANDBOX_MODE=plain to accept "
    "running model-written code uncontained")


@dataclass(frozen=True)
class SandboxMode:
    """What this worker does with the coder's Python, and why."""

    name: str  # ISOLATED, PLAIN or REFUSED
    reason: str = ""
    # REFUSED only: whether the cause lasts as long as the worker (kept) or may pass (probed again).
    lasting: bool = True

    def refusal(self) -> ApplicationError:
        if not self.lasting:
            return sandbox_error(f"python_repl_tool could not run code on this worker: {self.reason}; "
                                 "the next call tries again")
        return sandbox_error(f"python_repl_tool refuses to run code on this worker: {self.reason}. {_HOW_TO_CONTAIN}.",
                             non_retryable=True)


@dataclass(frozen=True)
class ProbeFailure:
    reason: str
    lasting: bool


async def _probe_isolated(settings: Settings) -> ProbeFailure | None:
    """Run a trivial snippet isolated; return why it is not contained, or None."""
    try:
        result = await execute(_PROBE_CODE, ISOLATED, 10.0, SandboxLimits.from_settings(settings),
                               settings.sandbox_uid_base)
    except SandboxStartError as error:
        return ProbeFailure(error.message, lasting=error.lasting)
    except ApplicationError as error:  # every uid busy: may pass
        return ProbeFailure(error.message, lasting=False)
    except OSError as error:  # no process or descriptor left to start the bootstrap: may pass
        return ProbeFailure(str(error), lasting=False)
    if result.exit_code != 0:
        return ProbeFailure(f"exit code {result.exit_code}: {result.stderr.strip()[-300:]}", lasting=False)
    uid_and_pid = result.stdout.split()
    if len(uid_and_pid) != 2 or uid_and_pid[0] == "0" or uid_and_pid[1] != "1":
        return ProbeFailure(f"the probe was not contained (uid and pid: {result.stdout.strip()!r})", lasting=True)
    return None


async def _detect_mode(settings: Settings) -> SandboxMode:
    configured = settings.sandbox_mode.strip().lower() or ISOLATED
    if configured == PLAIN:
        return SandboxMode(PLAIN, f"{MODE_ENV}=plain: model-written code runs uncontained, as this worker's user")
    if configured != ISOLATED:
        return SandboxMode(REFUSED, f"{MODE_ENV}={configured!r} is not a mode; use 'isolated' or 'plain' "
                                    "('unprivileged' was removed: it could not contain the network and files)")
    failure = await _probe_isolated(settings)
    if failure is None:
        return SandboxMode(ISOLATED)
    return SandboxMode(REFUSED, f"the isolated sandbox does not work here ({failure.reason})", failure.lasting)


class SandboxActivities:
    """``python_repl_tool``, built with the worker's settings (mode, limits, uid pool).

    The mode is probed once per object (the worker builds one) and then kept: containment does
    not change while the worker runs, and a probe per call would double each call's cost. A
    refusal whose cause may pass (a shortage of memory, processes or uids) is not kept: the next
    call probes again, so a moment's shortage does not disable the sandbox for the worker's life.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._mode: SandboxMode | None = None
        self._mode_lock = asyncio.Lock()

    async def mode(self) -> SandboxMode:
        """This worker's sandbox mode, probed on first use and then cached."""
        mode = self._mode
        if mode is None:
            async with self._mode_lock:
                mode = self._mode or await _detect_mode(self.settings)
                if mode.lasting:
                    self._mode = mode
        return mode

    async def self_check(self) -> SandboxMode:
        """At worker start: probe now and say what python_repl_tool will do, loudly if not contained."""
        mode = await self.mode()
        if mode.name == ISOLATED:
            logger.info("python_repl_tool sandbox: isolated (namespaces, chroot, pool uid, disk cap)")
        elif mode.name == PLAIN:
            logger.warning("!!! python_repl_tool sandbox is OFF: %s. Only for a single trusted user. !!!", mode.reason)
        elif mode.lasting:
            logger.error("python_repl_tool will refuse every call: %s. %s.", mode.reason, _HOW_TO_CONTAIN)
        else:
            logger.warning("python_repl_tool sandbox probe failed (%s); the first call probes again", mode.reason)
        return mode

    @activity.defn(name="python_repl_tool")
    @heartbeating
    async def python_repl_tool(self, request: PythonRequest) -> PythonResult:
        """Run the coder's Python in the sandbox; failures of the code are results, not errors."""
        mode = await self.mode()
        if mode.name == REFUSED:
            raise mode.refusal()
        return await execute(request.code, mode.name, clamp_timeout(request.timeout_seconds),
                             SandboxLimits.from_settings(self.settings), self.settings.sandbox_uid_base)
