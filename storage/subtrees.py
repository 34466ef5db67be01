"""Content-addressed JSON subtrees: the large parts of a payload stored once, history keeping references.

Why: the agent loop re-sends the whole conversation and the tool specs on every turn, and every
step's model input quotes earlier findings, so a run's history grew faster than linearly with its
plan. Whole-payload offloading (runtime/converter.py) only helps payloads over its threshold, and
stores each of them whole. This codec, first in the data converter's codec chain (before
encryption), replaces each large part of an activity's ``json/plain`` input or result (a long
string such as a message's content or a finding, or an object or array such as the tools list)
with ``{"$subtree": "<sha256 of the stored blob>"}``. The same bytes map to the same blob, so the
system prompt, the tools list and earlier messages are stored once however often they recur.

With encryption on, each blob is sealed deterministically (``EncryptionCodec.seal_deterministic``:
a synthetic nonce from a keyed hash of the plaintext), so nothing is plaintext at rest and equal
subtrees still make one blob across processes; with random nonces every process would store its
own copy. What that reveals, which blobs are equal, is what any deduplicating store reveals.

One level only: a stored subtree is always fully expanded (it never holds a reference), so the
blob collector (runtime/blob_gc.py) finds every subtree blob by reading history payloads alone. A
payload that would still be over the whole-payload threshold after shrinking is left whole, so a
marked payload never lands in the store itself. Marked payloads carry the encoding
``json/deerflow-subtrees``: decoding walks only those, so payloads without it (every history
recorded before this codec) decode as before, and a reader without this codec fails on an unknown
encoding instead of misreading references as values.

Untrusted clients can hand-craft a marked payload. A malformed reference, or one to a blob the
store never wrote, is refused with the non-retryable error of ``storage.references``, so the run
fails at once instead of retrying its workflow task for good.

Two small in-process caches keep the cost per activity low: the blobs known to be stored (so a
recurring subtree is not written again; an entry expires after ``KNOWN_TTL_SECONDS``, well under
the one-hour minimum margin of ``blobs gc``, so a reused blob's age is refreshed by a real store
call before the collector could judge it unused) and the blobs recently written or read (so the
workflow side of the same worker reads nothing back).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, Self, runtime_checkable

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    WithSerializationContext,
)

from storage.references import invalid_reference

ENCODING = b"json/deerflow-subtrees"
PLAIN = b"json/plain"
REF_KEY = "$subtree"
REF_MARK = b'"$subtree"'
# A reference exactly as this codec writes it (compact JSON). In JSON text the quoted key can only
# be a key or a whole string: inside a longer string its quotes would be escaped.
REF = re.compile(rb'\{"\$subtree":"([0-9a-f]{64})"\}')
REF_BYTES = len('{"$subtree":""}') + 64
# Where the S3 store keeps subtree blobs (storage/s3.py), below its key prefix: by content alone.
SUBTREE_KEY_PREFIX = "v0/d/sha256/"
KNOWN_TTL_SECONDS = 600.0
KNOWN_ENTRIES = 20_000
READ_CACHE_BYTES = 32 * 1024 * 1024
# Kept below the whole-payload threshold by this much, so encryption's overhead cannot tip a
# shrunk payload into the store.
ENVELOPE_MARGIN = 256


@runtime_checkable
class SubtreeDriver(Protocol):
    """A storage driver that can name the claim of a blob from its digest alone.

    References in history hold only the digest (78 bytes each); our drivers store subtree blobs
    under content-addressed names shared by every run, so the claim follows from it.
    """

    def name(self) -> str: ...

    async def store(self, context: StorageDriverStoreContext,
                    payloads: Sequence[Payload]) -> list[StorageDriverClaim]: ...

    async def retrieve(self, context: StorageDriverRetrieveContext,
                       claims: Sequence[StorageDriverClaim]) -> list[Payload]: ...

    def claim_for(self, digest: str) -> StorageDriverClaim: ...


class Sealer(Protocol):
    """The encryption a subtree blob goes through: deterministic, so equal subtrees stay one blob."""

    def seal_deterministic(self, payload: Payload) -> Payload: ...

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]: ...

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]: ...


def compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def reference(digest: str) -> bytes:
    return b'{"$subtree":"' + digest.encode() + b'"}'


def is_marked(payload: Payload) -> bool:
    return payload.metadata.get("encoding") == ENCODING


def references_in(payload: Payload) -> set[str]:
    """The blob digests a marked payload references (refusing malformed ones); empty if unmarked.

    Found by pattern, without parsing: every ``"$subtree"`` must be part of a reference written
    the way this codec writes them, so a hand-made variant (other keys, spaces, a path) is refused.
    """
    if not is_marked(payload):
        return set()
    found = REF.findall(payload.data)
    if payload.data.count(REF_MARK) != len(found):
        raise invalid_reference("Malformed subtree reference in a json/deerflow-subtrees payload")
    return {digest.decode() for digest in found}


class _Caches:
    """What one process knows of the store, shared by every context-bound copy of the codec."""

    def __init__(self) -> None:
        self.known: OrderedDict[bytes, tuple[str, float]] = OrderedDict()  # sha256(text) -> (blob digest, when)
        self.texts: OrderedDict[str, bytes] = OrderedDict()  # blob digest -> subtree JSON text
        self.text_bytes = 0


class SubtreeCodec(PayloadCodec, WithSerializationContext):
    """Shrinks large JSON payloads to references on encode and expands them on decode.

    ``inner`` (encryption) runs after shrinking on encode and before expanding on decode, so
    history holds ciphertext of the shrunk payload and each blob is sealed on its own.

    Only activity inputs and results (and their failures and heartbeats) are shrunk: that is
    where conversations, tool output and findings travel, and history grows. Payloads in a
    workflow's own context (start input, signals, updates, the ``status`` query, the result,
    memo and details) stay as they were, so the ``temporal`` CLI and the Web UI read them without
    a codec server, as the public contract promises. Marked payloads decode in every context.
    """

    def __init__(self, driver: SubtreeDriver, *, payload_min_bytes: int, subtree_min_bytes: int,
                 max_shrunk_bytes: int, inner: Sealer | None = None, shrink: bool = True) -> None:
        self._driver = driver
        self._payload_min = payload_min_bytes
        self._subtree_min = subtree_min_bytes
        self._max_shrunk = max_shrunk_bytes - ENVELOPE_MARGIN
        self._inner = inner
        self._caches = _Caches()
        # ``shrink`` off: this process only reads subtrees (a read-only store user).
        self._shrinks = shrink
        # The SDK binds a context for each payload of every workflow task and activity, so both
        # bindings are built once here: the writer (activity contexts, and direct use), the reader
        # (every other context). They share the caches.
        self._writer: SubtreeCodec = self
        self._reader: SubtreeCodec = self
        if shrink:
            self._reader = copy.copy(self)
            self._reader._shrinks = False
            self._reader._reader = self._reader

    @property
    def inner(self) -> Sealer | None:
        return self._inner

    def with_context(self, context: SerializationContext) -> Self:
        """The writer in an activity's context, else the reader. No copy per payload, and the
        data converter, handed back the codec it holds, is not cloned either."""
        return self._writer if isinstance(context, ActivitySerializationContext) else self._reader

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        shrunk = [await self._shrink(payload) for payload in payloads] if self._shrinks else list(payloads)
        return await self._inner.encode(shrunk) if self._inner is not None else shrunk

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        opened = await self._inner.decode(payloads) if self._inner is not None else list(payloads)
        return [await self._expand(payload) if is_marked(payload) else payload for payload in opened]

    # ------------------------------------------------------------------------------- encoding

    async def _shrink(self, payload: Payload) -> Payload:
        if (payload.metadata.get("encoding") != PLAIN or len(payload.data) < self._payload_min
                or REF_MARK in payload.data):  # a value that looks like a reference stays as it is
            return payload
        try:
            tree = json.loads(payload.data)
        except (ValueError, RecursionError):
            return payload
        texts: dict[str, bytes] = {}  # sha256 of each new subtree's text -> text
        shrunk, _, has_ref = self._replace(tree, texts)
        if not has_ref:
            return payload
        digests = await self._store(texts)
        data = REF.sub(lambda match: reference(digests[match[1].decode()]), compact(shrunk))
        if len(data) > self._max_shrunk:
            return payload  # whole-payload offloading stores it, unmarked
        result = Payload()
        result.CopyFrom(payload)
        result.metadata["encoding"] = ENCODING
        result.data = data
        return result

    def _replace(self, node: Any, texts: dict[str, bytes]) -> tuple[Any, int, bool]:
        """Post-order: (the node or a provisional reference, its approximate size, whether it holds one).

        A long string is replaced; an object or array is replaced whole when it is large and holds
        no reference below it (so no stored subtree ever contains one). Provisional references name
        the SHA-256 of the subtree's text, swapped for the blob digest once stored.
        """
        if isinstance(node, str):
            size = len(node) + 2
            return (self._reference(node, texts), REF_BYTES, True) if size >= self._subtree_min else (node, size, False)
        if isinstance(node, dict):
            items = {key: self._replace(child, texts) for key, child in node.items()}
            size = 2 + sum(len(key) + 4 + child_size for key, (_, child_size, _) in items.items())
            has_ref = any(child_has for _, _, child_has in items.values())
            value: Any = {key: child for key, (child, _, _) in items.items()} if has_ref else node
        elif isinstance(node, list):
            elements = [self._replace(child, texts) for child in node]
            size = 2 + sum(child_size + 1 for _, child_size, _ in elements)
            has_ref = any(child_has for _, _, child_has in elements)
            value = [child for child, _, _ in elements] if has_ref else node
        else:
            return node, 8, False
        if not has_ref and size >= self._subtree_min:
            return self._reference(node, texts), REF_BYTES, True
        return value, size, has_ref

    @staticmethod
    def _reference(node: Any, texts: dict[str, bytes]) -> dict[str, str]:
        text = compact(node)
        key = hashlib.sha256(text).hexdigest()
        texts[key] = text
        return {REF_KEY: key}

    async def _store(self, texts: dict[str, bytes]) -> dict[str, str]:
        """Store the subtrees not known to be stored (one driver call); text hash -> blob digest."""
        now = time.monotonic()
        digests: dict[str, str] = {}
        missing: list[str] = []
        for key in texts:
            known = self._caches.known.get(bytes.fromhex(key))
            if known is not None and now - known[1] < KNOWN_TTL_SECONDS:
                digests[key] = known[0]
            else:
                missing.append(key)
        if missing:
            blobs = [Payload(metadata={"encoding": PLAIN}, data=texts[key]) for key in missing]
            if self._inner is not None:
                blobs = [self._inner.seal_deterministic(blob) for blob in blobs]
            claims = await self._driver.store(StorageDriverStoreContext(target=None), blobs)
            for key, claim in zip(missing, claims, strict=True):
                digest = claim.claim_data["hash_value"]
                if not self._driver.claim_for(digest).claim_data.items() <= claim.claim_data.items():
                    raise RuntimeError(f"Driver {self._driver.name()!r} stored a subtree under an unexpected name")
                digests[key] = digest
                self._remember(bytes.fromhex(key), digest, now)
                self._cache_text(digest, texts[key])
        return digests

    def _remember(self, key: bytes, digest: str, now: float) -> None:
        self._caches.known[key] = (digest, now)
        self._caches.known.move_to_end(key)
        while len(self._caches.known) > KNOWN_ENTRIES:
            self._caches.known.popitem(last=False)

    def _cache_text(self, digest: str, text: bytes) -> None:
        if digest in self._caches.texts:
            self._caches.texts.move_to_end(digest)
            return
        self._caches.texts[digest] = text
        self._caches.text_bytes += len(text)
        while self._caches.text_bytes > READ_CACHE_BYTES and self._caches.texts:
            _, dropped = self._caches.texts.popitem(last=False)
            self._caches.text_bytes -= len(dropped)

    # ------------------------------------------------------------------------------- decoding

    async def _expand(self, payload: Payload) -> Payload:
        texts = await self._read(references_in(payload))
        data = REF.sub(lambda match: texts[match[1].decode()], payload.data)
        result = Payload()
        result.CopyFrom(payload)
        result.metadata["encoding"] = PLAIN
        result.data = data
        return result

    async def _read(self, digests: set[str]) -> dict[str, bytes]:
        texts = {digest: self._caches.texts[digest] for digest in digests if digest in self._caches.texts}
        missing = sorted(digests - texts.keys())
        if missing:
            claims = [self._driver.claim_for(digest) for digest in missing]
            blobs = await self._driver.retrieve(StorageDriverRetrieveContext(), claims)
            if self._inner is not None:
                blobs = await self._inner.decode(blobs)
            for digest, blob in zip(missing, blobs, strict=True):
                text = self._subtree_text(digest, blob)
                texts[digest] = text
                self._cache_text(digest, text)
        return texts

    @staticmethod
    def _subtree_text(digest: str, blob: Payload) -> bytes:
        """A blob's JSON text, checked: only a subtree this codec wrote may be spliced into a payload."""
        try:
            if blob.metadata.get("encoding") != PLAIN:
                raise ValueError(blob.metadata.get("encoding"))
            json.loads(blob.data)
        except (ValueError, RecursionError):
            raise invalid_reference(f"Blob sha256:{digest} is not a JSON subtree") from None
        if REF_MARK in blob.data:
            raise invalid_reference(f"Blob sha256:{digest} holds a reference; subtrees never nest")
        return blob.data
