"""The API server's small pieces, without Temporal: SSE framing and keep-alive, offsets, feedback, doors."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from server import sse
from server.chat import feedback_text, problem
from server.feed import parse_position
from server.security import Guard, RequestError, check_bind, is_loopback
from server.threads import run_count
from tests.support.web_server import parse_sse


async def _slow(chunks: list[str], pause: float) -> AsyncIterator[str]:
    for chunk in chunks:
        await asyncio.sleep(pause)
        yield chunk


async def test_keep_alive_comments_fill_quiet_periods_and_parsers_skip_them() -> None:
    got = [chunk async for chunk in sse.with_keep_alive(_slow([sse.event("a", {"n": 1})], 0.35), 0.1)]
    assert got.count(sse.KEEP_ALIVE) >= 2 and got[-1].startswith("event: a\n")
    assert parse_sse("".join(got)) == [("a", {"n": 1})]


async def test_a_failing_source_is_raised_to_the_stream() -> None:
    async def broken() -> AsyncIterator[str]:
        yield "x"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        [chunk async for chunk in sse.with_keep_alive(broken(), 1.0)]


def test_events_are_one_line_json_with_lf_only() -> None:
    text = sse.event("message_chunk", {"content": "line1\nline2\r\n"}, "0.5.1")
    assert text == 'id: 0.5.1\nevent: message_chunk\ndata: {"content": "line1\\nline2\\r\\n"}\n\n'


@pytest.mark.parametrize(("text", "position"), [
    ("0.12.3", (0, 12, 3)), (None, None), ("", None), ("1.2", None), ("a.b.c", None), ("-1.2.3", None),
    ("1" * 20 + ".1.1", None),
])
def test_offsets(text: str | None, position: tuple[int, int, int] | None) -> None:
    assert parse_position(text) == position


def test_feedback_follows_deerflow_protocol() -> None:
    assert feedback_text("accepted", "Cool! Let's get started.") == "[ACCEPTED]"
    assert feedback_text("EDIT_PLAN", " add costs ") == "[EDIT_PLAN] add costs"
    with pytest.raises(RequestError):
        feedback_text("[ACCEPTED] and more", "")


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("10.0.0.1", False), ("example.com", False),
])
def test_binds_beyond_loopback_need_a_token(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    if loopback:
        check_bind(host, False)
    else:
        with pytest.raises(RequestError):
            check_bind(host, False)
        check_bind(host, True)


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.1:8000", True), ("localhost:8000", True), ("[::1]:8000", True), ("localhost", True),
    ("evil.example:8000", False), ("127.0.0.1.evil.example", False), ("", False),
])
def test_host_header_must_name_loopback_without_a_token(host: str, allowed: bool) -> None:
    guard = Guard(app=None, tokens={}, allowed_origins=[])  # type: ignore[arg-type]
    assert (guard._problem("GET", {"host": host}, None) is None) is allowed


def test_an_update_nobody_takes_is_explained() -> None:
    assert "is a worker running?" in problem(WorkflowUpdateRPCTimeoutOrCancelledError())


class _Thread:
    """A client whose thread has runs ``1..runs``: ``describe()`` of any other number is NOT_FOUND,
    as Temporal answers for a workflow id it never saw."""

    def __init__(self, runs: int) -> None:
        self.runs = runs
        self.looked_up: list[int] = []

    def get_workflow_handle(self, workflow_id: str) -> Any:
        number = int(workflow_id.rsplit(".", 1)[1])

        async def describe() -> None:
            self.looked_up.append(number)
            if not 1 <= number <= self.runs:
                raise RPCError(f"workflow not found for ID: {workflow_id}", RPCStatusCode.NOT_FOUND, b"")
        return SimpleNamespace(describe=describe)


@pytest.mark.parametrize("runs", [0, 1, 2, 3, 7, 8, 99, 100, 101, 102, 1000, 123_457])
async def test_a_threads_newest_run_is_found_with_no_cap_in_few_look_ups(runs: int) -> None:
    thread = _Thread(runs)
    assert await run_count(thread, "deerflow-web-", "t") == runs  # type: ignore[arg-type]
    assert len(thread.looked_up) <= 2 * math.log2(runs + 1) + 2, thread.looked_up
