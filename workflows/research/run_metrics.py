"""Counters of runs by phase and by outcome, from workflow code (pure and replay-safe).

Why ``workflow.metric_meter()``: it records nothing while the workflow replays, so a run evicted
from the cache, or moved to another worker, is not counted twice; and it issues no command, so
histories are unchanged. It is a no-op unless the worker opened a metrics endpoint.
"""

from __future__ import annotations

from temporalio import workflow

from workflows.contracts.research import Outcome
from workflows.contracts.status import Phase

ENDED = (Phase.COMPLETED, Phase.FAILED)


def count_phase(phase: Phase, outcome: Outcome | None) -> None:
    """Count a run entering ``phase``; at the last phase, count its end with ``outcome`` too."""
    meter = workflow.metric_meter()
    meter.create_counter("deerflow_run_phases", "Runs entering each phase").add(1, {"phase": phase.value})
    if phase in ENDED:
        count_end(outcome if outcome is not None else Outcome.FAILED)  # None: a refused start input


def count_end(outcome: Outcome) -> None:
    """Count a run's end: at its last phase, or when it is cancelled (which enters no phase)."""
    workflow.metric_meter().create_counter("deerflow_runs_ended", "Runs ended, by outcome").add(
        1, {"outcome": outcome.value})
