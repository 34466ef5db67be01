"""The ``chat`` activity as the worker registers it: the model turn of ``activities/model/llm.py``,
imported on first use.

langchain and the openai SDK take seconds to import (``python -X importtime worker.py``), and a
worker that replaces a dead one must poll at once (``activities/support/lazy.py``). So the worker registers
this light class, and the turn itself (prompt, context window, output cap, provider errors) stays
in ``activities/model/llm.py``, which the tests also drive directly.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.support.lazy import MODEL_MODULE, load
from activities.support.retry_pacing import carried_detail, paced_retries, provider_failures
from config.settings import Settings
from runtime.heartbeat import carry, heartbeating
from workflows.contracts.chat import ChatRequest, ChatResponse
from workflows.contracts.usage import Usage

_log = logging.getLogger(__name__)


class ChatActivity:
    """Built with the worker's settings; holds the one ``ModelActivities`` (and its caches of
    context windows and tool support) once the first call has imported it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._model: Any = None

    @activity.defn(name="chat")
    @heartbeating
    @paced_retries
    async def chat(self, request: ChatRequest) -> ChatResponse:
        """One model turn (``activities.model.llm.ModelActivities.chat`` records telemetry).

        It beats from here, before the import, because a worker that replaces a dead one may
        still be importing the model libraries when the retried call arrives: a wait of seconds,
        longer than the call's short heartbeat timeout. Once imported, its beats say a call is in
        flight (:func:`in_flight`).
        """
        model = await self._turns()
        earlier = earlier_usage(activity.info())
        # Nothing is awaited before this on a warm worker, so it is the attempt's first beat, which the
        # SDK sends at once; later beats wait for its throttle (HEARTBEAT_THROTTLE).
        carry(provider_failures(activity.info()), in_flight(earlier))
        try:
            response: ChatResponse = await model.chat(request)
        except ApplicationError as error:
            raise with_earlier(error, earlier) from error.__cause__
        response.usage.add(earlier)
        return response

    async def warm(self) -> None:
        """At worker start (``worker.py``'s warm-up, once the workers poll): what the first turn of
        each tier would pay on a run's critical path (``ModelActivities.warm``). Best effort: a
        provider or setting it trips on is met again, with its own error, by the first turn."""
        try:
            await (await self._turns()).warm()
        except Exception as error:
            _log.warning("The model turns' warm-up failed (%s): the first turn pays for it", type(error).__name__)

    async def _turns(self) -> Any:
        if self._model is None:
            self._model = (await load(MODEL_MODULE)).ModelActivities(self.settings)
        return self._model


def earlier_usage(info: activity.Info) -> Usage:
    """What the calls of this turn's earlier, failed attempts spent, as the last of them reported it
    (``retry_pacing.carried_detail``): it counts in this attempt's usage, or in its failure's."""
    carried = carried_detail(info)
    if isinstance(carried, Usage):
        return carried
    try:
        return Usage.model_validate(carried) if isinstance(carried, dict) else Usage()
    except ValidationError:
        return Usage()


def in_flight(earlier: Usage) -> Usage:
    """``earlier`` and the call this attempt is making, for the next attempt should this one be lost
    with its worker: the provider may have served (and billed) it, so it counts as a call, its
    tokens unknown."""
    spent = earlier.model_copy(deep=True)
    spent.llm_calls += 1
    return spent


def with_earlier(error: ApplicationError, earlier: Usage) -> ApplicationError:
    """``error`` with ``earlier`` added to the usage in its first detail (the calls it made, if any)."""
    if not earlier.llm_calls:
        return error
    spent = earlier.model_copy()
    if error.details and isinstance(error.details[0], Usage):
        spent.add(error.details[0])
    return ApplicationError(error.message, spent, *error.details[1:], type=error.type, category=error.category,
                            non_retryable=error.non_retryable, next_retry_delay=error.next_retry_delay)
