"""The workflow sandbox, with payload serialization contexts answered without entering it.

Why: for every payload of a workflow task the SDK asks the workflow instance which serialization
context applies (the workflow's, or the activity's a command schedules), two or three times per
payload: for the codec, the external store and the reference codec. The stock sandboxed instance
answers each question by entering the sandbox: it compiles a code string and swaps
``sys.modules``, ``__import__`` and the restricted builtins in and out, about 170 us each. A
research workflow task carries 11 such questions (the activity result, the next activity's input
and its summary), about 2 of its 6 ms on the worker, on the critical path between every two model
calls (bench/overhead.py).

The answer is a pure lookup (the workflow's info and the pending command's activity type, id and
queue; no import, no user code, no state change), so this runner keeps the SDK's sandbox for
everything the workflow's code does (activations, queries, updates) and asks the instance the
SDK created inside the sandbox directly. It finds that instance through the public
``runner_class`` hook of :class:`SandboxedWorkflowRunner`: the inner runner records what it
creates, keyed by the run's ``Info`` object (the sandbox copies the details, not their info),
and this module is passed through the sandbox so both sides share that record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio.worker import (
    UnsandboxedWorkflowRunner,
    WorkflowInstance,
    WorkflowInstanceDetails,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

if TYPE_CHECKING:
    from temporalio.bridge.proto.workflow_activation import WorkflowActivation
    from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
    from temporalio.converter import SerializationContext, StorageDriverStoreContext
    from temporalio.worker._command_aware_visitor import CommandInfo
    from temporalio.workflow import Info

# id(details.info) -> the instance created inside the sandbox, until the outer runner takes it.
# A plain dict: the sandbox restricts thread-locals.
_created: dict[int, WorkflowInstance] = {}


class _RecordingRunner(UnsandboxedWorkflowRunner):
    """Runs inside the sandbox (as its ``runner_class``) and hands the instance it creates out."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        instance = super().create_instance(det)
        _created[id(det.info)] = instance
        return instance


class _DirectContextInstance(WorkflowInstance):
    """The sandboxed instance for the workflow's code; its inner instance for context lookups."""

    def __init__(self, sandboxed: WorkflowInstance, inner: WorkflowInstance) -> None:
        self._sandboxed = sandboxed
        self._inner = inner

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        return self._sandboxed.activate(act)

    def get_serialization_context(self, command_info: CommandInfo | None) -> SerializationContext | None:
        return self._inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: CommandInfo | None) -> StorageDriverStoreContext:
        return self._inner.get_external_store_context(command_info)

    def get_info(self) -> Info:
        return self._sandboxed.get_info()

    def get_thread_id(self) -> int | None:
        # The deadlock detector interrupts the thread running the workflow's code: the sandbox's.
        return self._sandboxed.get_thread_id()


class DirectContextSandboxRunner(SandboxedWorkflowRunner):
    """:class:`SandboxedWorkflowRunner` whose instances answer serialization contexts directly."""

    def __init__(self) -> None:
        # Passed through: the sandbox imports the runner class by module, and a fresh copy of this
        # module inside it would record into its own dict.
        super().__init__(restrictions=SandboxRestrictions.default.with_passthrough_modules(__name__),
                         runner_class=_RecordingRunner)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        try:
            sandboxed = super().create_instance(det)
        finally:
            inner = _created.pop(id(det.info), None)
        if inner is None:  # an SDK that builds the inner instance elsewhere: keep its own lookups
            return sandboxed
        return _DirectContextInstance(sandboxed, inner)


def workflow_runner() -> WorkflowRunner:
    """The runner every worker and replayer of this project uses."""
    return DirectContextSandboxRunner()
