"""Deleting the blobs of runs the Temporal server no longer keeps (``starter.py blobs gc``).

A run's history is removed after the namespace's retention period (or by ``temporal workflow
delete``), but its large payloads stay in the blob store. A blob may go only when no run the
server keeps can still name it, and only when it is older than a safety margin: a payload is
written before the history that names it is (an activity result before its completion reaches the
server, a start input before the run exists), so a young blob may belong to a run in flight.
Anything the collector cannot read or account for is kept, never guessed about.

How a blob maps to its runs differs by store:

- **S3.** The SDK's driver names each key after the run it was stored for,
  ``v0/ns/<namespace>/wt/<type>/wi/<workflow id>/ri/<run id or null>/d/sha256/<digest>``: a blob
  is the run's when ``describe`` of that run (of the workflow id, for ``null``) says NotFound.
  Keys of other namespaces, of standalone activities or without a run are kept.
- **Filesystem.** Blobs are named by content only and shared by every run that stores the same
  bytes, so the collector marks every blob that any history the server keeps references (running
  and closed runs alike) and sweeps the rest.
- **Subtree blobs** (storage/subtrees.py) are shared by every run in both stores (S3 keys
  ``v0/d/sha256/<digest>``): they are marked from the subtree references inside history payloads
  (decrypted with the operator's keys when encryption is on) and swept like filesystem blobs. A
  stored subtree never holds a reference, so history payloads are all the collector reads.

What it cannot read: anyone who may start workflows can start one of a made-up type, on a queue
nobody polls, whose input is a codec-encoded reference, ciphertext under an unknown key, or a
reference that is not JSON; and anyone who may signal a run can put such a payload in its history.
Those are skipped and listed (``GcReport.unreadable``), never a reason to stop: in a workflow that
is not ours (``OUR_TYPES``) nothing of ours depends on them, whatever they are (ciphertext on a
deployment without keys too), and what clients hand our runs (the start input, signals, updates)
never holds a subtree reference and is refused by the worker when it cannot be read. Only a
payload our worker wrote (an activity's input or result, a continuation) that the collector cannot
read stops it, as a run of ours may depend on it; and so does any ciphertext in a run of ours when
the collector has no keys, since our worker's own payloads are then encrypted as well.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from google.protobuf import json_format
from google.protobuf.json_format import ParseError
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.sdk.v1.external_storage_pb2 import ExternalStorageReference
from temporalio.client import Client
from temporalio.converter import PayloadCodec
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from runtime.encryption import ENCODING as ENCRYPTED
from storage.filesystem import DRIVER_NAME, FileSystemStorageDriver
from storage.references import is_sha256_hex
from storage.subtrees import SUBTREE_KEY_PREFIX, references_in
from workflows.contracts.enhance import ENHANCER_WORKFLOW
from workflows.contracts.research import WORKFLOW_TYPE

if TYPE_CHECKING:  # only S3 deployments import its client
    from storage.s3 import S3Client

REFERENCE_TYPE = ExternalStorageReference.DESCRIPTOR.full_name.encode()
# The SDK marks a reference it has also passed through a payload codec; we cannot read those.
ENCODED_REFERENCE_MARKER = "__temporal_external_storage_reference"
RUN_KEY = re.compile(r"v0/ns/(?P<namespace>[^/]+)/wt/[^/]+/wi/(?P<workflow_id>[^/]+)/ri/(?P<run_id>[^/]+)"
                     r"/d/sha256/[0-9a-f]{64}")
DEFAULT_MIN_AGE = timedelta(days=7)
# The workflow types our workers run: every payload their workers wrote must be readable.
OUR_TYPES = frozenset({WORKFLOW_TYPE, ENHANCER_WORKFLOW})
# Events whose payloads come from clients, not from our worker (see the module's docstring).
FROM_CLIENTS = frozenset({
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
})


class BlobGcError(RuntimeError):
    """The collector stopped before deleting anything it could not vouch for."""


class Unreadable(Exception):
    """A history payload the collector cannot read: skipped or fatal, depending on who wrote it."""


class KeysNeeded(Unreadable):
    """Ciphertext, and the collector was given no keys: skipped in a workflow that is not ours, fatal
    in one of ours, where every payload our worker wrote is ciphertext too."""


NO_KEYS = ("History holds encrypted payloads: run blobs gc with the workers' DEERFLOW_ENCRYPTION_KEYS "
           "(or key file). Nothing was deleted.")


@dataclass
class GcReport:
    """What one collection did: the names it deleted (or would delete) and why the rest stayed."""

    deleted: list[str] = field(default_factory=list)
    kept_retained: int = 0  # a run the server keeps names it
    kept_recent: int = 0  # younger than the safety margin
    kept_unknown: int = 0  # no run to ask about (another namespace, no run id in the key, not a blob)
    unreadable: list[str] = field(default_factory=list)  # skipped payloads: workflow, event, why


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every Payload anywhere inside a protobuf message (repeated and map fields included)."""
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if descriptor.message_type.GetOptions().map_entry:
            children = [v for v in value.values() if isinstance(v, Message)]
        elif isinstance(value, Message):
            children = [value]
        else:  # a repeated message field
            children = list(value)
        for child in children:
            if isinstance(child, Payload):
                yield child
            else:
                yield from payloads_in(child)


def reference_of(payload: Payload) -> ExternalStorageReference | None:
    """The external-storage reference a history payload is, if it is one (``Unreadable`` if it cannot tell)."""
    if payload.metadata.get("messageType") == REFERENCE_TYPE:
        try:
            return json_format.Parse(payload.data, ExternalStorageReference(), ignore_unknown_fields=True)
        except (ParseError, RecursionError, UnicodeDecodeError) as error:
            raise Unreadable(f"a storage reference that does not parse ({str(error)[:120]})") from None
    if ENCODED_REFERENCE_MARKER in payload.metadata:
        raise Unreadable("a codec-encoded storage reference, which blob gc cannot read")
    return None


def _is_not_found(error: RPCError) -> bool:
    return error.status == RPCStatusCode.NOT_FOUND


async def _is_retained(client: Client, workflow_id: str, run_id: str | None) -> bool:
    """Whether the server still keeps this run (or, without a run id, any run of this workflow id)."""
    try:
        await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    except RPCError as error:
        if _is_not_found(error):
            return False
        raise BlobGcError(f"Cannot tell whether run {workflow_id} is kept ({error}): nothing was deleted.") from error
    return True


async def _subtrees_of(payload: Payload, decrypt: PayloadCodec | None) -> set[str]:
    """The subtree blobs a history payload references, reading through encryption.

    A malformed reference names no blob (a forged input the run refused), so it marks nothing;
    a payload the keys cannot open (or, without keys, any ciphertext) may reference anything: it is
    ``Unreadable``, and whose workflow it is in decides whether the collection stops.
    """
    if payload.metadata.get("encoding") == ENCRYPTED:
        if decrypt is None:
            raise KeysNeeded("an encrypted payload, and blob gc was given no keys")
        try:
            [payload] = await decrypt.decode([payload])
        except ApplicationError as error:
            raise Unreadable(f"a payload that cannot be decrypted ({error})") from None
        except Exception as error:  # decrypted bytes that are not a payload
            raise Unreadable(f"a payload that cannot be decrypted ({type(error).__name__})") from None
    try:
        return references_in(payload)
    except ApplicationError:
        return set()


async def _referenced(client: Client, decrypt: PayloadCodec | None,
                      unreadable: list[str]) -> tuple[set[str], set[str]]:
    """What any history the server keeps (open or closed) references: filesystem blob digests of
    whole payloads, and subtree blob digests. Skipped payloads are added to ``unreadable``."""
    whole: set[str] = set()
    subtrees: set[str] = set()
    async for execution in client.list_workflows():
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        try:
            history = await handle.fetch_history()
        except RPCError as error:
            if _is_not_found(error):
                continue  # deleted since it was listed: its blobs are no longer needed
            raise BlobGcError(f"Cannot read the history of {execution.id} ({error}): nothing was deleted.") from error
        ours = execution.workflow_type in OUR_TYPES
        for event in history.events:
            for payload in payloads_in(event):
                try:
                    reference = reference_of(payload)
                    if reference is None:
                        subtrees |= await _subtrees_of(payload, decrypt)
                    elif reference.driver_name == DRIVER_NAME:
                        whole.add(reference.claim_data.get("hash_value", ""))
                except Unreadable as error:
                    where = f"{execution.id} ({execution.workflow_type}), {_event_name(event)}"
                    if ours and isinstance(error, KeysNeeded):
                        raise BlobGcError(NO_KEYS) from None
                    if ours and event.event_type not in FROM_CLIENTS:
                        raise BlobGcError(f"{where} holds {error}: nothing was deleted.") from None
                    unreadable.append(f"{where}: {error}")
    return whole, subtrees


def _event_name(event: HistoryEvent) -> str:
    return f"event {event.event_id} ({EventType.Name(event.event_type).removeprefix('EVENT_TYPE_').lower()})"


# ----------------------------------------------------------------------------------- filesystem


def _blob_files(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        return
    for fan_out in sorted(root.iterdir()):
        if fan_out.is_dir() and len(fan_out.name) == 2:
            yield from (path for path in sorted(fan_out.iterdir())
                        if is_sha256_hex(path.name) and path.name.startswith(fan_out.name))


def _modified(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _delete_if_still_old(path: Path, cutoff: datetime) -> bool:
    """Delete an old blob unless a writer reused it meanwhile (the store refreshes a reused blob's mtime).

    The blob is first renamed aside, so a writer that checks for it afterwards writes it anew; a
    writer that refreshed it just before is seen by the second look at its age, and it goes back.
    """
    aside = path.with_name(f".{path.name}.gc")
    try:
        path.rename(aside)
    except FileNotFoundError:
        return False
    if _modified(aside) >= cutoff:
        aside.rename(path)
        return False
    aside.unlink()
    return True


async def collect_filesystem(client: Client, driver: FileSystemStorageDriver, *, min_age: timedelta,
                             dry_run: bool, now: datetime | None = None,
                             decrypt: PayloadCodec | None = None) -> GcReport:
    """Mark every blob a kept history references, then sweep the unreferenced blobs older than ``min_age``."""
    cutoff = (now or datetime.now(UTC)) - min_age
    report = GcReport()
    whole, subtrees = await _referenced(client, decrypt, report.unreadable)
    referenced = whole | subtrees
    for path in _blob_files(driver.root):
        if path.name in referenced:
            report.kept_retained += 1
        elif _modified(path) >= cutoff:
            report.kept_recent += 1
        elif dry_run or _delete_if_still_old(path, cutoff):
            report.deleted.append(str(path))
        else:
            report.kept_recent += 1
    return report


# ------------------------------------------------------------------------------------------ S3


async def _s3_objects(client: S3Client) -> AsyncIterator[tuple[str, datetime]]:
    async with client.open() as raw:
        paginator = raw.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=client.bucket, Prefix=client.prefix + "v0/"):
            for item in page.get("Contents", []):
                yield item["Key"], item["LastModified"]


async def collect_s3(client: Client, store: S3Client, *, min_age: timedelta, dry_run: bool,
                     now: datetime | None = None, decrypt: PayloadCodec | None = None) -> GcReport:
    """Delete the objects of runs the server no longer keeps, older than ``min_age``, in this namespace."""
    from botocore.exceptions import BotoCoreError, ClientError

    from storage.s3 import explain

    try:
        return await _collect_s3(client, store, min_age=min_age, dry_run=dry_run, now=now, decrypt=decrypt)
    except (BotoCoreError, ClientError) as error:
        raise BlobGcError(f"{explain(error, store)}. Nothing more was deleted.") from None


async def _collect_s3(client: Client, store: S3Client, *, min_age: timedelta, dry_run: bool,
                      now: datetime | None, decrypt: PayloadCodec | None) -> GcReport:
    cutoff = (now or datetime.now(UTC)) - min_age
    report = GcReport()
    retained: dict[tuple[str, str | None], bool] = {}
    doomed: list[str] = []
    subtrees: set[str] | None = None  # marked on the first old subtree blob
    doomed_subtrees: list[str] = []
    async for key, modified in _s3_objects(store):
        relative = key.removeprefix(store.prefix)
        if relative.startswith(SUBTREE_KEY_PREFIX) and is_sha256_hex(digest := relative[len(SUBTREE_KEY_PREFIX):]):
            if modified >= cutoff:
                report.kept_recent += 1
                continue
            if subtrees is None:
                subtrees = (await _referenced(client, decrypt, report.unreadable))[1]
            if digest in subtrees:
                report.kept_retained += 1
            else:
                doomed_subtrees.append(key)
            continue
        match = RUN_KEY.fullmatch(relative)
        if match is None or unquote(match["namespace"]) != client.namespace:
            report.kept_unknown += 1
            continue
        if modified >= cutoff:
            report.kept_recent += 1
            continue
        run = (unquote(match["workflow_id"]), None if match["run_id"] == "null" else unquote(match["run_id"]))
        if run not in retained:
            retained[run] = await _is_retained(client, *run)
        if retained[run]:
            report.kept_retained += 1
        else:
            doomed.append(key)
    if doomed_subtrees and not dry_run:
        # A run may have reused (rewritten) a shared subtree blob since the listing: look again.
        async with store.open() as raw:
            ages = [(await raw.head_object(Bucket=store.bucket, Key=key))["LastModified"] for key in doomed_subtrees]
        report.kept_recent += sum(1 for modified in ages if modified >= cutoff)
        doomed_subtrees = [key for key, modified in zip(doomed_subtrees, ages, strict=True) if modified < cutoff]
    doomed += doomed_subtrees
    if doomed and not dry_run:
        async with store.open() as raw:
            for start in range(0, len(doomed), 1000):  # DeleteObjects takes at most 1,000 keys
                batch = [{"Key": key} for key in doomed[start:start + 1000]]
                response = await raw.delete_objects(Bucket=store.bucket, Delete={"Objects": batch, "Quiet": True})
                if response.get("Errors"):
                    first = response["Errors"][0]
                    raise BlobGcError(f"S3 refused to delete {first.get('Key')}: {first.get('Message')}")
    report.deleted = doomed
    return report
