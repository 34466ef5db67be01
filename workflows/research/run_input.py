"""Turns a research run's raw start inputs into a request (and a continuation), or a clear failure.

Each input is decoded as any workflow's is (workflows/calls/inputs.py). Continuation state (plan,
findings, the worker's limits) comes only from continue-as-new: it must name the run that wrote
it, and that must be the run this one continues. A client-started run has no predecessor, and a
retried or cron run's input was written before its predecessor's run id existed, so neither can
carry a forged checkpoint past this check.
"""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.common import RawValue
from temporalio.converter import PayloadConverter

from workflows.calls.inputs import decode_input, invalid_request
from workflows.contracts.research import ResearchRequest
from workflows.research.run_state import RunContinuation


def parse_inputs(inputs: Sequence[RawValue], converter: PayloadConverter,
                 continued_run_id: str | None) -> tuple[ResearchRequest, RunContinuation | None]:
    """The request, and the continuation state when this run really continues the run that wrote it."""
    if len(inputs) == 2 and continued_run_id:
        request = decode_input(inputs[0], ResearchRequest, converter)
        continuation = decode_input(inputs[1], RunContinuation, converter)
        if continuation.written_by_run_id != continued_run_id:
            raise invalid_request("the continuation state was not written by the run this run continues")
        return request, continuation
    if len(inputs) != 1:
        raise invalid_request(f'expected one input, a JSON object like {{"question": "..."}}; got {len(inputs)}')
    return decode_input(inputs[0], ResearchRequest, converter), None
