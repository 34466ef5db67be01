"""The ``chat`` activity as the worker registers it: the model turn of ``activities/model/llm.py``,
imported on first use.

langchain and the openai SDK take seconds to import (``python -X importtime worker.py``), and a
worker that replaces a dead one must poll at once (``activities/support/lazy.py``). So the worker registers
this light class, and the turn itself (prompt, context window, output cap, provider errors) stays
in ``activities/model/llm.py``, which the tests also drive directly.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from activities.support.heartbeat import heartbeating
from activities.support.lazy import MODEL_MODULE, load
from activities.support.retry_pacing import paced_retries
from config.settings import Settings
from workflows.models import ChatRequest, ChatResponse


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
        longer than the call's short heartbeat timeout.
        """
        if self._model is None:
            self._model = (await load(MODEL_MODULE)).ModelActivities(self.settings)
        return await self._model.chat(request)
