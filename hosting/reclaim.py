"""At a worker's start: fail the attempts its dead predecessors on this machine left open.

Why: the server only gives up an attempt lost with a killed worker when its heartbeat timeout
expires (4 s for model calls and searches, 10 s for the rest), and that wait was most of a crash's
resume time. A dead worker's journal (hosting/inflight_journal.py) names those attempts by task
token, so its successor fails each one with a retryable ``WorkerLost`` error and the server retries
it after ``LOST_ATTEMPT_RETRY``, as it would after the timeout. What the attempt asked to carry to
its next attempt (the journal's ``*`` lines: a chat turn's call in flight, and the provider's
failures so far) goes with the failure as its last heartbeat details, which the server hands to the
retry: a beat that said so may never have left the dead process.

Sound because the server checks the attempt a token names: a stale token (that attempt completed,
timed out or was retried meanwhile) is refused with NotFound and counts as done, so an attempt that
is not the current one is never failed. A journal is claimed by renaming it before its tokens are
used, so two workers starting together do not both process it, and it is deleted afterwards. A
live worker's journal (its lock is held), or one written under another kernel, is never touched.
Nothing here stops the worker: every failure is logged and the heartbeat timeout remains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from config.settings import Settings
from hosting.inflight_journal import (
    SUFFIX,
    InflightJournal,
    JournalContents,
    OpenAttempt,
    ProcessStamp,
    is_dead,
    read_journal,
)
from workflows.calls.activity_options import LOST_ATTEMPT_RETRY

logger = logging.getLogger(__name__)

WORKER_LOST = "WorkerLost"
CLAIMED = ".claimed-"
# Tokens failed at once; a dead worker may have left hundreds (a full model queue).
RECLAIM_CONCURRENCY = 16
FAIL_TIMEOUT = timedelta(seconds=10)
# The longest the rest of a worker's warm-up waits for the attempts it reclaimed (worker.py).
SETTLE_SECONDS = 10.0
# A dead journal of another Temporal server, a claimed one whose claimer died, or a compaction's
# leftover, is deleted once this old: every attempt in it has long been given up by its heartbeat
# or start-to-close timeout.
STALE_SECONDS = 3600.0


def journal_directory(settings: Settings) -> Path:
    return settings.home / "inflight"


def open_journal(settings: Settings, client: Client) -> InflightJournal | None:
    """This process's journal, or None when turned off or the directory cannot be written (logged)."""
    if not settings.reclaim_lost_attempts:
        return None
    stamp = ProcessStamp.here(client.identity, client.service_client.config.target_host, client.namespace)
    try:
        return InflightJournal(journal_directory(settings), stamp).start()
    except OSError as error:
        logger.warning("No in-flight journal in %s (%s): a restart of this worker will wait for the heartbeat "
                       "timeouts of its lost attempts", journal_directory(settings), error.strerror or error)
        return None


async def reclaim_at_start(client: Client, journal: InflightJournal) -> int:
    """Reclaim dead predecessors' attempts: how many were failed (to be retried now). Never raises:
    the worker runs on whatever happens here."""
    try:
        outcomes = await reclaim_lost_attempts(client, journal.directory, journal.stamp)
    except Exception:
        logger.exception("Reclaiming dead workers' attempts failed; their heartbeat timeouts still apply")
        return 0
    if outcomes:
        logger.info("Reclaimed dead workers' attempts: %s", dict(outcomes))
    return outcomes["failed"]


async def settled(journal: InflightJournal, timeout: float = SETTLE_SECONDS) -> None:
    """Until this worker has no attempt in flight, or ``timeout`` seconds: the worker's remaining
    warm-up (seconds of imports and a process start) waits for the reclaimed attempts it is retrying."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while journal.in_flight and loop.time() < deadline:
        await asyncio.sleep(0.05)


async def reclaim_lost_attempts(client: Client, directory: Path, here: ProcessStamp) -> Counter[str]:
    """Fail the open attempts of every dead journal in ``directory`` for ``here``'s server.

    Returns counts: ``journals`` claimed, attempts ``failed``, ``stale`` (NotFound: done already),
    ``errors`` (logged), ``unparsed`` journal lines skipped.
    """
    outcomes: Counter[str] = Counter()
    semaphore = asyncio.Semaphore(RECLAIM_CONCURRENCY)
    _delete_stale_claims(directory)
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        if path.name == f"{here.instance}{SUFFIX}":
            continue
        contents = read_journal(path)
        if contents is None or not is_dead(path, contents.stamp, here):
            continue  # not a journal, its worker lives, or it ran under another kernel
        stamp = contents.stamp
        if (stamp.address, stamp.namespace) != (here.address, here.namespace):
            if _age(path) > STALE_SECONDS:
                _delete(claim(path, here))
            continue  # another server's tokens: a worker of that server may still reclaim them
        claimed = claim(path, here)
        if claimed is None:
            continue  # another starting worker took it first
        # Read again: lines its writer appended after the first read, before it died, count too.
        contents = read_journal(claimed) or contents
        outcomes["journals"] += 1
        outcomes.update(await _fail_all(client, contents, here, semaphore))
        _delete(claimed)
    return outcomes


async def hand_back(client: Client, journal: InflightJournal) -> Counter[str]:
    """Fail this live process's own attempts in flight with ``WorkerLost``, so they are retried
    elsewhere now: for a worker told to stop at once (a second signal), which would otherwise leave
    them to their heartbeat timeouts. Counts as :func:`reclaim_lost_attempts`; never raises."""
    message = f"worker {journal.stamp.identity} was stopped during this attempt (before it could finish)"
    semaphore = asyncio.Semaphore(RECLAIM_CONCURRENCY)
    return Counter(await asyncio.gather(*(_fail(client, attempt, message, semaphore)
                                          for attempt in journal.open_attempts())))


def claim(path: Path, here: ProcessStamp) -> Path | None:
    """Rename ``path`` to a name only ``here`` uses; None if another worker renamed it first."""
    claimed = path.with_name(f"{path.name}{CLAIMED}{here.instance}")
    try:
        path.rename(claimed)
    except FileNotFoundError:
        return None
    return claimed


async def _fail_all(client: Client, contents: JournalContents, here: ProcessStamp,
                    semaphore: asyncio.Semaphore) -> Counter[str]:
    stamp = contents.stamp
    if contents.skipped:
        logger.warning("In-flight journal of worker %s: %d line(s) did not parse and were skipped",
                       stamp.identity, contents.skipped)
    message = (f"worker {stamp.identity} was lost during this attempt (its process ended); "
               f"reclaimed by {here.identity} at its start")
    results = await asyncio.gather(*(_fail(client, attempt, message, semaphore) for attempt in contents.attempts))
    return Counter({"unparsed": contents.skipped}) + Counter(results)


async def _fail(client: Client, attempt: OpenAttempt, message: str, semaphore: asyncio.Semaphore) -> str:
    """Fail one attempt by its token, with the details it carries: ``failed``, ``stale`` (NotFound) or
    ``errors`` (logged, never the token)."""
    # The provider never failed: retry as soon as after a heartbeat timeout, not after a provider's back-off.
    error = ApplicationError(message, type=WORKER_LOST, next_retry_delay=LOST_ATTEMPT_RETRY)
    async with semaphore:
        try:
            await client.get_async_activity_handle(task_token=attempt.token).fail(
                error, last_heartbeat_details=attempt.carried, rpc_timeout=FAIL_TIMEOUT)
        except RPCError as rpc_error:
            if rpc_error.status == RPCStatusCode.NOT_FOUND:
                return "stale"  # that attempt is over already: nothing to reclaim
            logger.warning("Could not reclaim a lost attempt (%s): %s", rpc_error.status.name, rpc_error.message)
            return "errors"
        except Exception as other:  # the SDK's own refusals (a token it cannot encode, say)
            logger.warning("Could not reclaim a lost attempt: %s", type(other).__name__)
            return "errors"
    return "failed"


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _delete(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def _delete_stale_claims(directory: Path) -> None:
    """Claimed journals whose claimer died, and a compaction's leftover (``.journal.compacting``)."""
    for path in directory.glob(f"*{SUFFIX}.*"):
        if _age(path) > STALE_SECONDS:
            path.unlink(missing_ok=True)
