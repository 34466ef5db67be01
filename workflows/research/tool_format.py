"""Renders a ``PythonResult`` as the tool message the coder reads (pure, workflow-safe).

A failed run starts with ``Error`` (as DeerFlow's tool messages do), so the model sees at once
that it must fix something; the sandbox's own reason comes first when the sandbox stopped the
code, because a limit calls for a different fix (less output, less memory) than a bug does.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.tool_activities import PythonResult

# Spelled out rather than taken from the signal module: tool text must not depend on the worker.
_SIGNAL_NAMES = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV",
                 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}

_STOP_REASONS = {
    "memory": "it ran out of memory (MemoryError); use less memory, e.g. process the data in pieces",
    "cpu": "it used up its CPU time limit",
    "output": "it printed more output than the sandbox accepts; print summaries, not whole datasets",
}


def _timeout_reason(result: PythonResult, timeout_seconds: float | None) -> str:
    if timeout_seconds is not None:
        return f"it exceeded the {timeout_seconds:g} s time limit"
    return f"it exceeded its time limit (stopped after {result.duration_seconds:.0f} s)"


def _status_line(result: PythonResult, timeout_seconds: float | None) -> str:
    if result.stopped == "timeout":
        return f"Error: the sandbox stopped the code: {_timeout_reason(result, timeout_seconds)}."
    if result.stopped:
        reason = _STOP_REASONS.get(result.stopped, f"limit {result.stopped!r} reached")
        return f"Error: the sandbox stopped the code: {reason}."
    if result.exit_code is None:
        return "Error: the sandbox did not report how the code ended."
    if result.exit_code < 0:
        signum = -result.exit_code
        return f"Error: the code was killed by signal {_SIGNAL_NAMES.get(signum, signum)}."
    if result.exit_code > 0:
        return f"Error: exit code {result.exit_code}"
    return "Successfully executed."


def format_python_result(result: PythonResult, timeout_seconds: float | None = None) -> str:
    """The tool message for one ``python_repl_tool`` run.

    ``timeout_seconds`` (the request's) lets a timeout message name the limit; without it the
    message gives how long the code ran.
    """
    parts = [_status_line(result, timeout_seconds)]
    if result.stdout:
        parts.append(f"Stdout:\n{result.stdout.rstrip()}")
    elif not result.stderr:
        parts.append("Stdout: (nothing was printed; use print() to see values)")
    if result.stderr:
        parts.append(f"Stderr:\n{result.stderr.rstrip()}")
    return "\n".join(parts)
