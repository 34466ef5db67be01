"""The secret scrubber and the interceptor that applies it to everything an activity hands back.

The interceptor is driven directly with a stand-in for the next interceptor, so each way text
leaves an activity (result, failure message, details, cause chain, heartbeat) is checked without a
server; tests/test_canary.py checks the whole path in a real run.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any, cast

import pytest
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.worker import ActivityInboundInterceptor, ActivityOutboundInterceptor, ExecuteActivityInput

from activities.guards.secret_scrubber import REDACTED, ScrubbingLogFilter, SecretScrubber, secret_values
from config.mcp_servers import MCPServerConfig
from config.settings import Settings
from hosting.scrub_interceptor import SecretScrubbingInterceptor
from workflows.contracts.tool_activities import MCPCallResult

KEY = "sk-test-openai-0123456789"


# The scrubber of a worker configured with one key, in an environment with no other secrets.
SCRUBBER = SecretScrubber.for_settings(Settings(OPENAI_API_KEY=KEY), environ={})


def test_secret_values_cover_settings_env_and_mcp_servers() -> None:
    settings = Settings(
        OPENAI_API_KEY=KEY,
        TAVILY_API_KEY="offline",  # too short to be a secret: scrubbing it would mangle prose
        DEERFLOW_SECRET_ENV_NAMES="PLAIN_NAMED",
        MCP_SERVERS={
            "gh": MCPServerConfig(
                env={"GITHUB_TOKEN": "ghp-literal-token", "MODE": "${MODE_VALUE}", "LANGUAGE": "english-plain"},
                headers={"Authorization": "Bearer ${GH_HEADER_TOKEN}", "X-Static": "static-header-secret"},
            )
        },
    )
    # AWS keys are botocore's to read from the environment (not settings): scrubbed by their names.
    environ = {"AWS_SECRET_ACCESS_KEY": "aws-secret-value", "GH_HEADER_TOKEN": "gh-header-token",
               "MODE_VALUE": "mode-from-env", "DEPLOY_PASSWORD": "hunter2hunter2",
               "PLAIN_NAMED": "listed-by-operator", "HOME": "/root/home/dir"}

    values = set(secret_values(settings, environ))

    assert {KEY, "aws-secret-value", "ghp-literal-token", "gh-header-token", "mode-from-env", "static-header-secret",
            "hunter2hunter2", "listed-by-operator"} <= values
    assert "/root/home/dir" not in values and "english-plain" not in values
    assert SecretScrubber(values).scrub("key offline") == "key offline"


def test_scrub_replaces_longest_first_and_walks_structures() -> None:
    scrubber = SecretScrubber(["abcdefgh", "abcdefgh-longer", "short"])

    assert scrubber.scrub("x abcdefgh-longer y abcdefgh short") == f"x {REDACTED} y {REDACTED} short"
    result = scrubber.scrub_value(MCPCallResult(content="token=abcdefgh"))
    assert result == MCPCallResult(content=f"token={REDACTED}")
    assert scrubber.scrub_value({"a": ["abcdefgh", 3], "b": ("abcdefgh",)}) == {"a": [REDACTED, 3], "b": (REDACTED,)}


class _Next(ActivityInboundInterceptor):
    """Stands in for the activity: returns or raises what the test gives it."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        pass

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


async def run_through(outcome: Any) -> Any:
    interceptor = SecretScrubbingInterceptor(SCRUBBER).intercept_activity(_Next(outcome))
    return await interceptor.execute_activity(cast(ExecuteActivityInput, None))


async def test_results_are_scrubbed() -> None:
    assert await run_through(MCPCallResult(content=f"env: {KEY}")) == MCPCallResult(content=f"env: {REDACTED}")


async def test_application_errors_keep_their_shape_with_secrets_scrubbed() -> None:
    try:
        raise OSError(f"connect failed with {KEY}")
    except OSError as cause:
        original = ApplicationError(f"bad key {KEY}", {"echo": KEY}, type="MCPUnavailable", non_retryable=True,
                                    next_retry_delay=timedelta(seconds=3))
        original.__cause__ = cause

    with pytest.raises(ApplicationError) as caught:
        await run_through(original)

    error = caught.value
    assert (error.message, error.type, error.non_retryable, error.next_retry_delay) == (
        f"bad key {REDACTED}", "MCPUnavailable", True, timedelta(seconds=3))
    assert error.details == ({"echo": REDACTED},)
    assert isinstance(error.__cause__, ApplicationError)
    assert error.__cause__.message == f"connect failed with {REDACTED}" and error.__cause__.type == "OSError"


async def test_plain_exceptions_become_scrubbed_application_errors() -> None:
    with pytest.raises(ApplicationError) as caught:
        await run_through(ValueError(f"provider said: invalid key {KEY}"))

    assert caught.value.message == f"provider said: invalid key {REDACTED}"
    assert caught.value.type == "ValueError" and not caught.value.non_retryable


@pytest.mark.parametrize("cancellation", [asyncio.CancelledError(), CancelledError("cancelled")])
async def test_cancellation_passes_through(cancellation: BaseException) -> None:
    with pytest.raises(type(cancellation)):
        await run_through(cancellation)


async def test_heartbeat_details_are_scrubbed() -> None:
    sent: list[tuple[Any, ...]] = []

    class Outbound(ActivityOutboundInterceptor):
        def __init__(self) -> None:
            pass

        def heartbeat(self, *details: Any) -> None:
            sent.append(details)

    inbound = SecretScrubbingInterceptor(SCRUBBER).intercept_activity(_Next(None))
    captured: list[ActivityOutboundInterceptor] = []
    inbound.next = cast(ActivityInboundInterceptor, type("N", (), {"init": lambda self, o: captured.append(o)})())
    inbound.init(Outbound())
    captured[0].heartbeat(f"progress {KEY}", 3)

    assert sent == [(f"progress {REDACTED}", 3)]


def test_log_filter_scrubs_messages_and_tracebacks() -> None:
    try:
        raise RuntimeError(f"refused {KEY}")
    except RuntimeError as exc:
        record = logging.LogRecord("httpx", logging.INFO, __file__, 1, "GET %s", (f"/search?key={KEY}",),
                                   (type(exc), exc, exc.__traceback__))

    assert ScrubbingLogFilter(SCRUBBER).filter(record)

    assert record.getMessage() == f"GET /search?key={REDACTED}"
    assert record.exc_text is not None and KEY not in record.exc_text and f"refused {REDACTED}" in record.exc_text
