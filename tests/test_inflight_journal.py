"""The in-flight journal and the reclaim of a dead worker's attempts, without a server.

The server's side (a reclaimed attempt is retried at once, a stale token is refused) is in
tests/test_crash.py; here a stub client records the tokens failed, so each rule of the reclaim
(dead or alive, pid reuse, another server's journal, a claim taken by another worker, NotFound)
is checked in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import ActivityEnvironment
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput

from hosting import inflight_journal, reclaim
from hosting.inflight_journal import InflightJournal, OpenAttempt, ProcessStamp, is_dead, read_journal
from hosting.journal_interceptor import InflightJournalInterceptor
from hosting.reclaim import WORKER_LOST, claim, reclaim_at_start, reclaim_lost_attempts, settled
from runtime.heartbeat import carried_details_sink
from runtime.process_info import start_ticks
from workflows.calls.activity_options import LOST_ATTEMPT_RETRY
from workflows.contracts.usage import Usage

ADDRESS = "127.0.0.1:7233"


def here() -> ProcessStamp:
    return ProcessStamp.here("me@host", ADDRESS, "default")


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def journal_of(directory: Path, tokens: list[bytes], died: bool = False, **stamp: object) -> InflightJournal:
    """A journal written by a worker described by ``stamp`` (this process by default), holding ``tokens``.

    ``died``: its file is closed with the attempts open, so its lock is free, as the kernel leaves it.
    """
    journal = InflightJournal(directory, here().model_copy(update=stamp)).start()
    for token in tokens:
        journal.opened(token)
    if died:
        journal.close()
    return journal


class StubHandle:
    def __init__(self, client: StubClient, token: bytes) -> None:
        self.client, self.token = client, token

    async def fail(self, error: Exception, *, last_heartbeat_details: list[Any], **_: object) -> None:
        if self.token in self.client.stale:
            raise RPCError("activity task not found", RPCStatusCode.NOT_FOUND, b"")
        self.client.failed[self.token] = error
        self.client.carried[self.token] = last_heartbeat_details


class StubClient:
    """Records which attempts were failed, and how; ``stale`` tokens are refused as the server does."""

    def __init__(self, stale: set[bytes] | None = None) -> None:
        self.stale = stale or set()
        self.failed: dict[bytes, Exception] = {}
        self.carried: dict[bytes, list[Any]] = {}

    def get_async_activity_handle(self, *, task_token: bytes) -> StubHandle:
        return StubHandle(self, task_token)


# ---------------------------------------------------------------- the journal


def test_the_journal_holds_the_attempts_started_and_not_ended(tmp_path: Path) -> None:
    directory = tmp_path / "inflight"
    journal = journal_of(directory, [b"one", b"two\n\x00"])
    entry = journal.opened(b"three")
    journal.closed(0)
    assert read_journal(journal.path).tokens == [b"two\n\x00", b"three"]  # type: ignore[union-attr]
    journal.closed(entry)
    contents = read_journal(journal.path)
    assert contents is not None and contents.tokens == [b"two\n\x00"] and contents.stamp == journal.stamp
    assert directory.stat().st_mode & 0o777 == 0o700 and journal.path.stat().st_mode & 0o777 == 0o600
    journal.close()
    assert journal.path.exists(), "an attempt still open is left to a successor"
    journal.closed(1)  # closed after the file is: no write, no error


def test_a_graceful_exit_with_nothing_open_deletes_the_journal(tmp_path: Path) -> None:
    journal = journal_of(tmp_path, [b"one"])
    journal.closed(0)
    journal.close()
    assert list(tmp_path.iterdir()) == []


def test_compaction_keeps_only_the_open_attempts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflight_journal, "COMPACT_LINES", 10)
    journal = journal_of(tmp_path, [b"kept"])
    for number in range(25):
        journal.closed(journal.opened(f"done-{number}".encode()))
    last = journal.opened(b"after")  # written to the compacted file
    lines = journal.path.read_text().splitlines()
    assert len(lines) < 12, lines
    assert read_journal(journal.path).tokens == [b"kept", b"after"]  # type: ignore[union-attr]
    journal.closed(last)
    assert read_journal(journal.path).tokens == [b"kept"]  # type: ignore[union-attr]
    assert [path.name for path in tmp_path.iterdir()] == [journal.path.name]


def test_what_an_open_attempt_carries_is_noted_until_it_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The details a chat turn carries (failures so far, and the usage with its call in flight) are
    read back with its token, survive a compaction, and go when the attempt ends."""
    monkeypatch.setattr(inflight_journal, "COMPACT_LINES", 10)
    journal = journal_of(tmp_path, [b"turn", b"search"])
    journal.carried(0, [1, Usage(llm_calls=3)])
    journal.carried(0, [1, Usage(llm_calls=4)])  # the newest counts
    journal.carried(7, [9])  # not open: ignored
    journal.carried(1, [object()])  # not JSON: dropped, never raised
    contents = read_journal(journal.path)
    assert contents is not None and [(a.token, a.carried) for a in contents.attempts] == [
        (b"turn", [1, Usage(llm_calls=4).model_dump()]), (b"search", [])]
    for number in range(25):
        journal.closed(journal.opened(f"done-{number}".encode()))
    assert read_journal(journal.path).attempts[0].carried[1]["llm_calls"] == 4  # type: ignore[union-attr]
    assert journal.open_attempts()[0].carried[1]["llm_calls"] == 4
    journal.closed(0)
    journal.opened(b"next")
    assert [a.carried for a in read_journal(journal.path).attempts] == [[], []]  # type: ignore[union-attr]


def test_a_write_that_fails_turns_the_journal_off_without_failing_the_attempt(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    journal = journal_of(tmp_path, [])
    assert journal._fd is not None
    os.close(journal._fd)  # the next write fails with EBADF
    journal.closed(journal.opened(b"token"))
    assert "turned off" in caplog.text


def test_lines_that_do_not_parse_are_skipped(tmp_path: Path) -> None:
    journal = journal_of(tmp_path, [b"good"])
    with journal.path.open("a") as file:
        file.write("+7 not*base64\n?\n-x\n+8 dG9ybg==\n*8 {\"x\":1}\n*8 [1,\n*x []\n+9 dG9")  # torn last line
    contents = read_journal(journal.path)
    assert contents is not None and contents.tokens == [b"good", b"torn"] and contents.skipped == 7
    assert [attempt.carried for attempt in contents.attempts] == [[], []]


def test_a_file_that_is_not_a_journal_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "x.journal"
    path.write_text("not json\n+0 dG9r\n")
    assert read_journal(path) is None and "header" in caplog.text


# ---------------------------------------------------------------- dead or alive


def test_dead_or_alive_by_pid_and_start_time() -> None:
    me = here()
    assert me.start_ticks is not None and me.is_alive()
    assert not me.model_copy(update={"pid": dead_pid()}).is_alive()
    # The pid runs, but it is another process than the one that wrote the journal (a reused pid).
    assert not me.model_copy(update={"start_ticks": me.start_ticks - 1}).is_alive()
    assert start_ticks(dead_pid()) is None


def test_dead_needs_a_free_lock_and_in_this_pid_namespace_a_pid_gone(tmp_path: Path) -> None:
    me = here()
    assert me.start_ticks is not None
    cases: dict[str, tuple[bool, dict[str, object], bool]] = {  # name: (died, stamp, dead?)
        "live, its lock held": (False, {"pid": dead_pid()}, False),
        "dead, lock free and pid gone": (True, {"pid": dead_pid()}, True),
        "dead, lock free and pid reused": (True, {"start_ticks": me.start_ticks - 1}, True),
        "live, lock free and its pid runs (its journal turned off)": (True, {}, False),
        "dead, lock free in another pid namespace (a restarted container)": (True, {"pid_namespace": "pid:[1]"}, True),
        "live, another pid namespace holding its lock (a sibling container)": (
            False, {"pid_namespace": "pid:[1]"}, False),
        "left alone, another kernel": (True, {"pid": dead_pid(), "boot_id": "another-boot"}, False),
    }
    for number, (name, (died, stamp, dead)) in enumerate(cases.items()):
        journal = journal_of(tmp_path / str(number), [b"token"], died=died, **stamp)
        assert is_dead(journal.path, journal.stamp, me) is dead, name


# ---------------------------------------------------------------- reclaim


async def test_reclaim_fails_the_open_attempts_of_dead_workers_only(tmp_path: Path) -> None:
    me = here()
    assert me.start_ticks is not None
    InflightJournal(tmp_path, me).start().opened(b"mine")
    live = journal_of(tmp_path, [b"live"])  # another live worker: its lock is held
    dead = journal_of(tmp_path, [b"lost-1", b"lost-2", b"done"], pid=dead_pid(), identity="123@host")
    dead.carried(0, [2, {"llm_calls": 5}])
    dead.closed(2)
    dead.close()
    journal_of(tmp_path, [b"reused"], died=True, start_ticks=me.start_ticks - 1)
    elsewhere = journal_of(tmp_path, [b"elsewhere"], died=True, pid=dead_pid(), boot_id="another-boot")
    other_server = journal_of(tmp_path, [b"other-server"], died=True, pid=dead_pid(), address="127.0.0.1:1")
    client = StubClient(stale={b"lost-2"})

    outcomes = await reclaim_lost_attempts(client, tmp_path, me)  # type: ignore[arg-type]

    assert set(client.failed) == {b"lost-1", b"reused"}
    assert client.carried == {b"lost-1": [2, {"llm_calls": 5}], b"reused": []}, "the retry is handed what it carried"
    assert outcomes == Counter(journals=2, failed=2, stale=1)
    error = client.failed[b"lost-1"]
    assert isinstance(error, ApplicationError) and error.type == WORKER_LOST and not error.non_retryable
    assert error.next_retry_delay == LOST_ATTEMPT_RETRY and "123@host" in error.message
    remaining = {path.name for path in tmp_path.iterdir()}
    assert remaining == {f"{j.stamp.instance}.journal" for j in (live, elsewhere, other_server)} | {
        f"{me.instance}.journal"}, "the dead journals are deleted, the others left alone"
    assert read_journal(live.path).tokens == [b"live"]  # type: ignore[union-attr]


async def test_leftovers_are_deleted_once_stale(tmp_path: Path) -> None:
    """A dead journal of another server, a claim whose claimer died, a compaction's temporary file."""
    other_server = journal_of(tmp_path, [b"other-server"], died=True, pid=dead_pid(), address="127.0.0.1:1")
    abandoned = tmp_path / "a.journal.claimed-b"
    abandoned.write_text("")
    fresh = tmp_path / "c.journal.compacting"
    fresh.write_text("")
    for path in (other_server.path, abandoned):
        os.utime(path, (0, 0))
    client = StubClient()
    assert await reclaim_lost_attempts(client, tmp_path, here()) == Counter()  # type: ignore[arg-type]
    assert client.failed == {} and list(tmp_path.iterdir()) == [fresh]


def test_a_claim_is_taken_once(tmp_path: Path) -> None:
    dead = journal_of(tmp_path, [b"lost"], died=True, pid=dead_pid())
    first, second = here(), here()
    claimed = claim(dead.path, first)
    assert claimed is not None and claimed.exists() and not dead.path.exists()
    assert claim(dead.path, second) is None


async def test_reclaim_errors_are_logged_without_the_token(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Refusing(StubClient):
        def get_async_activity_handle(self, *, task_token: bytes) -> StubHandle:
            raise RPCError("bad token", RPCStatusCode.INVALID_ARGUMENT, b"")

    journal_of(tmp_path, [b"SECRET-TOKEN"], died=True, pid=dead_pid())
    with caplog.at_level(logging.INFO):
        outcomes = await reclaim_lost_attempts(Refusing(), tmp_path, here())  # type: ignore[arg-type]
    assert outcomes == Counter(journals=1, errors=1)
    assert "INVALID_ARGUMENT" in caplog.text and "SECRET" not in caplog.text


async def test_reclaim_at_start_counts_what_it_failed_and_never_raises(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    journal_of(tmp_path, [b"lost-1", b"lost-2"], died=True, pid=dead_pid())
    mine = InflightJournal(tmp_path, here()).start()
    assert await reclaim_at_start(StubClient(), mine) == 2  # type: ignore[arg-type]

    async def broken(*_: object) -> Counter[str]:
        raise OSError("directory gone")

    monkeypatch.setattr(reclaim, "reclaim_lost_attempts", broken)
    assert await reclaim_at_start(StubClient(), mine) == 0  # type: ignore[arg-type]
    assert "heartbeat timeouts still apply" in caplog.text


async def test_settled_waits_for_the_attempts_in_flight_within_a_bound(tmp_path: Path) -> None:
    journal = journal_of(tmp_path, [b"retried"])
    waiting = asyncio.create_task(settled(journal, timeout=60))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    journal.closed(0)
    await asyncio.wait_for(waiting, timeout=5)
    journal.opened(b"long")
    await asyncio.wait_for(settled(journal, timeout=0.1), timeout=5)  # gives up waiting: never hangs


# ---------------------------------------------------------------- the interceptor


@pytest.mark.parametrize("outcome", [None, ApplicationError("provider down"), asyncio.CancelledError()],
                         ids=["completed", "failed", "cancelled"])
async def test_the_interceptor_journals_each_attempt_until_it_ends(
        tmp_path: Path, outcome: BaseException | None) -> None:
    journal = journal_of(tmp_path, [])
    seen: list[list[bytes]] = []

    class Activity(ActivityInboundInterceptor):
        def __init__(self) -> None:  # the innermost: no next interceptor
            pass

        async def execute_activity(self, input: ExecuteActivityInput) -> Any:
            sink = carried_details_sink.get()
            assert sink is not None
            sink([1, "carried"])
            seen.append(read_journal(journal.path).attempts)  # type: ignore[union-attr]
            if outcome is not None:
                raise outcome
            return "done"

    inbound = InflightJournalInterceptor(journal).intercept_activity(Activity())
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, task_token=b"attempt-token")

    async def attempt() -> Any:
        return await inbound.execute_activity(cast(ExecuteActivityInput, None))

    with contextlib.suppress(type(outcome) if outcome else ()):
        assert await environment.run(attempt) == "done"
    assert seen == [[OpenAttempt(b"attempt-token", [1, "carried"])]]
    assert read_journal(journal.path).tokens == []  # type: ignore[union-attr]
    assert carried_details_sink.get() is None, "the sink is this attempt's only"
