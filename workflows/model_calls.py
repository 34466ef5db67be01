"""The one way workflow code calls the model: the ``chat`` activity with its timeouts and retries."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.models import ChatMessage, ChatRequest, ChatResponse, Usage

# Every I/O activity heartbeats every 2 s (the SDK sends at most one per 80% of this timeout), so
# a call in flight on a dead worker is retried within about 10 s instead of its start-to-close.
HEARTBEAT_TIMEOUT = timedelta(seconds=10)

# Retries are bounded in count and in total time, so a provider that stays down ends the run
# with its error instead of retrying for ever. 429s wait as long as the provider asks (the
# activity sets next_retry_delay from Retry-After).
CHAT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=6,
    non_retryable_error_types=["ModelProviderError", "PromptError"],
)


async def call_model(request: ChatRequest, usage: Usage) -> ChatMessage:
    """Run one model turn and add its token usage to ``usage``."""
    response = await workflow.execute_activity(
        "chat",
        request,
        result_type=ChatResponse,
        start_to_close_timeout=timedelta(minutes=5),
        schedule_to_close_timeout=timedelta(minutes=20),
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=CHAT_RETRY,
    )
    usage.add(response.usage)
    return response.message
