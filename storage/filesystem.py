"""A content-addressed blob store on the local filesystem, for single-machine deployments.

The embedded dev server, the worker and the CLI run on one machine by default, so a directory
under ``DEERFLOW_HOME`` is the simplest store they can all share. Blobs are named by the SHA-256 of
the serialized payload: storing the same bytes twice (a retried activity, a replayed workflow)
writes nothing new, and a blob can be checked against its name when it is read back.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from storage.references import HASH_ALGORITHM, invalid_reference, is_sha256_hex

DRIVER_NAME = "deerflow.filesystem"
INLINE_WRITE_BYTES = 256 * 1024


class PayloadStoreError(RuntimeError):
    """The blob store cannot be read right now: not there (unmounted, another DEERFLOW_HOME) or corrupted.

    It propagates out of payload decoding, so Temporal retries the workflow or activity task
    instead of failing the run: an operator can restore the blob store and the run carries on.
    """


class FileSystemStorageDriver(StorageDriver):
    """Stores each payload as ``<root>/<first two hex digits>/<sha256 hex digest>``.

    The two-character fan-out keeps directories small enough for any filesystem after many runs.
    """

    def __init__(self, root: Path, driver_name: str = DRIVER_NAME, *, fsync: bool = True) -> None:
        # Resolved once, so a later change of working directory cannot point reads elsewhere and
        # error messages name the real location.
        self._root = Path(root).expanduser().resolve()
        self._driver_name = driver_name
        self._fsync = fsync

    @property
    def root(self) -> Path:
        return self._root

    def name(self) -> str:
        """The name recorded in each reference; every component must register a driver by it."""
        return self._driver_name

    def type(self) -> str:
        return DRIVER_NAME

    def claim_for(self, digest: str) -> StorageDriverClaim:
        """The claim of the blob with this digest: blobs are named by content alone (subtrees need it)."""
        return StorageDriverClaim(claim_data={"hash_algorithm": HASH_ALGORITHM, "hash_value": digest})

    def path_for(self, digest: str) -> Path:
        """Where the blob with this hex digest lives (whether or not it exists)."""
        return self._root / digest[:2] / digest

    async def store(
        self,
        context: StorageDriverStoreContext,
        payloads: Sequence[Payload],
    ) -> list[StorageDriverClaim]:
        """Write the payloads (off the event loop, unless few, small and not synced) and return one
        claim per payload, in order."""
        blobs = [payload.SerializeToString() for payload in payloads]
        if not self._fsync and sum(map(len, blobs)) <= INLINE_WRITE_BYTES:
            # Without fsync a few small writes take microseconds: a thread hop would cost more.
            digests = self._write_all(blobs)
        else:
            digests = await asyncio.to_thread(self._write_all, blobs)
        return [
            StorageDriverClaim(claim_data={**self.claim_for(digest).claim_data, "size": str(len(b))})
            for digest, b in zip(digests, blobs, strict=True)
        ]

    async def retrieve(
        self,
        context: StorageDriverRetrieveContext,
        claims: Sequence[StorageDriverClaim],
    ) -> list[Payload]:
        """Read and verify the payloads (off the event loop), in the order of the claims."""
        digests = [self._digest_of(claim) for claim in claims]
        blobs = await asyncio.to_thread(self._read_all, digests)
        payloads = []
        for blob in blobs:
            payload = Payload()
            payload.ParseFromString(blob)
            payloads.append(payload)
        return payloads

    def _digest_of(self, claim: StorageDriverClaim) -> str:
        algorithm = claim.claim_data.get("hash_algorithm")
        digest = claim.claim_data.get("hash_value", "")
        if algorithm != HASH_ALGORITHM:
            raise invalid_reference(f"Unsupported payload claim hash algorithm {algorithm!r} (expected sha256)")
        # The digest becomes a path: accept nothing but a lower-case SHA-256 hex string.
        if not is_sha256_hex(digest):
            raise invalid_reference(f"Malformed payload claim digest {digest[:80]!r}")
        return digest

    def _write_all(self, blobs: list[bytes]) -> list[str]:
        """Write the blobs not yet stored, then make them durable together, then name them.

        Each new blob goes to a unique temporary name in its final directory and is renamed into
        place atomically, so a reader never sees a partial blob and concurrent writers of the same
        digest cannot corrupt it. All are written before any is fsynced: the first fsync's journal
        commit carries the others' data too, so a payload with several new subtrees costs about
        one commit instead of one each. The directories are fsynced after the renames, so the
        names are as durable as the data before any history names them.
        """
        digests = [hashlib.sha256(blob).hexdigest() for blob in blobs]
        written: list[tuple[Path, Path]] = []  # (temporary, final) of each new blob
        files: list[BinaryIO] = []
        try:
            for digest, blob in zip(digests, blobs, strict=True):
                path = self.path_for(digest)
                if self._present(path, len(blob)):
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                temporary = path.parent / f".{digest}.{uuid.uuid4().hex}.tmp"
                written.append((temporary, path))
                file = os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb")
                files.append(file)
                file.write(blob)
                file.flush()
            # History will reference these blobs as soon as the task completes: make them durable
            # first, unless the operator chose otherwise (DEERFLOW_BLOB_FSYNC).
            for file in files:
                if self._fsync:
                    os.fsync(file.fileno())
                file.close()
            for temporary, path in written:
                os.replace(temporary, path)
            if self._fsync:
                # The renames are directory entries: without this a power cut could leave history
                # naming a blob whose data is on disk under its temporary name, or nowhere.
                for folder in {path.parent for _, path in written}:
                    _fsync_directory(folder)
        finally:
            for file in files:
                file.close()
            for temporary, _ in written:
                temporary.unlink(missing_ok=True)
        return digests

    @staticmethod
    def _present(path: Path, size: int) -> bool:
        """Content-addressed: the same name means the same bytes. Refreshing the time tells
        `blobs gc` (runtime/blob_gc.py) that a run in flight uses it again; if gc moved it aside
        meanwhile, utime fails and the blob is written anew."""
        try:
            if path.stat().st_size == size:
                os.utime(path)
                return True
        except FileNotFoundError:
            pass
        return False

    def _read_all(self, digests: list[str]) -> list[bytes]:
        return [self._read(digest) for digest in digests]

    def _read(self, digest: str) -> bytes:
        path = self.path_for(digest)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            # Blobs are written and fsynced before any history names them: with the store in place,
            # an unknown digest did not come from a component sharing it.
            if self._root.is_dir() and any(self._root.iterdir()):
                raise invalid_reference(
                    f"Payload blob sha256:{digest} is not in the blob store at {self._root}, which this "
                    "store never wrote: the reference did not come from a component sharing this store."
                ) from None
            raise PayloadStoreError(
                f"Payload blob sha256:{digest} is missing from the blob store at {self._root} "
                f"(expected {path}). Every worker, client and replayer of a run must share the same blob "
                "store: set the same DEERFLOW_HOME (filesystem store) or use DEERFLOW_PAYLOAD_STORE=s3."
            ) from None
        actual = hashlib.sha256(blob).hexdigest()
        if actual != digest:
            raise PayloadStoreError(
                f"Payload blob {path} is corrupted: its content hashes to sha256:{actual}, "
                f"not sha256:{digest}. Restore it from a backup of the blob store at {self._root}."
            )
        return blob


def _fsync_directory(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
