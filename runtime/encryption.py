"""Optional payload encryption: AES-256-GCM with key ids, as a Temporal payload codec.

Why a codec: it runs inside the data converter (runtime/converter.py), so every payload the
worker, a client or the replayer writes is encrypted before it leaves the process, and the SDK
applies the codec *before* external storage: a payload offloaded to the blob store is stored
already encrypted, and history keeps only the reference. The Temporal server, its database, the
blob store and anyone reading them see ciphertext; the codec server (server/codec.py) decrypts
for the Web UI and the ``temporal`` CLI.

Each encrypted payload records the id of the key that wrote it, so keys can rotate: new payloads
use the active (first) key and any listed key still decrypts the payloads it wrote. The key id is
bound to the ciphertext as associated data, so a payload cannot be relabelled to another key.

Keys come only from the operator's configuration (``DEERFLOW_ENCRYPTION_KEYS`` or
``DEERFLOW_ENCRYPTION_KEY_FILE``). A payload that fails to decrypt (an unknown key id, tampered
bytes) raises a non-retryable error: such a payload can only come from outside (a forged start
input or signal), and a retryable one would leave the run retrying its workflow task for good.
(A worker decodes signals and updates through runtime/message_payloads.py, which turns such a
payload into a refused message instead of a failed run.)

A process *without* keys cannot tell a run's encrypted payloads from anything: it refuses them
with ``EncryptionKeysMissing`` (``KeylessGuard``), which names the setting and, in a worker, fails
the task so that the server retries it, on a worker that has the keys, instead of failing the run.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
from collections.abc import Sequence
from typing import Self

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec, SerializationContext, WithSerializationContext
from temporalio.exceptions import ApplicationError

from config.settings import Settings

ENCODING = b"binary/encrypted"
CIPHER = b"AES-256-GCM"
KEY_ID_KEY = "encryption-key-id"
CIPHER_KEY = "encryption-cipher"
NONCE_BYTES = 12  # 96 bits, GCM's native nonce size; a fresh random one per payload
KEY_BYTES = 32
KEY_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
NONCE_KEY_INFO = b"deerflow subtree synthetic nonce"
GENERATE_HINT = "generate one with: python -c \"import base64, os; print(base64.b64encode(os.urandom(32)).decode())\""


logger = logging.getLogger(__name__)


class EncryptionConfigError(ValueError):
    """The operator's key configuration is unusable: raised at start-up, and by a process without
    keys at an encrypted payload; never for a payload's own fault."""


class EncryptionKeysMissing(EncryptionConfigError):
    """This process has no keys and met an encrypted payload: its configuration's fault, not the run's."""


def parse_keys(text: str, source: str) -> dict[str, bytes]:
    """``id1:base64key,id2:base64key`` (commas or lines; ``#`` starts a comment) → keys in order.

    The first key is the active one. ``source`` names the setting in error messages, which never
    quote key material.
    """
    keys: dict[str, bytes] = {}
    entries = [entry.split("#", 1)[0].strip() for line in text.splitlines() for entry in line.split(",")]
    for entry in filter(None, entries):
        key_id, separator, encoded = (part.strip() for part in entry.partition(":"))
        if not separator or not KEY_ID_RE.match(key_id):
            raise EncryptionConfigError(
                f"{source}: each entry must be id:base64key with an id of letters, digits, '.', '_' or '-' "
                f"(got an entry starting {key_id[:16]!r})")
        if key_id in keys:
            raise EncryptionConfigError(f"{source}: key id {key_id!r} is listed twice")
        try:
            key = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise EncryptionConfigError(f"{source}: key {key_id!r} is not valid base64; {GENERATE_HINT}") from None
        if len(key) != KEY_BYTES:
            raise EncryptionConfigError(
                f"{source}: key {key_id!r} is {len(key)} bytes; AES-256 needs {KEY_BYTES}; {GENERATE_HINT}")
        keys[key_id] = key
    return keys


def configured_keys(settings: Settings) -> dict[str, bytes]:
    """The operator's keys (active first), or an empty dict when encryption is off."""
    if settings.encryption_keys and settings.encryption_key_file:
        raise EncryptionConfigError("Set DEERFLOW_ENCRYPTION_KEYS or DEERFLOW_ENCRYPTION_KEY_FILE, not both")
    if settings.encryption_key_file:
        path = settings.encryption_key_file.expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise EncryptionConfigError(f"DEERFLOW_ENCRYPTION_KEY_FILE: cannot read {path}: {error}") from None
        keys = parse_keys(text, f"DEERFLOW_ENCRYPTION_KEY_FILE ({path})")
        if not keys:
            raise EncryptionConfigError(f"DEERFLOW_ENCRYPTION_KEY_FILE ({path}) lists no key")
        return keys
    return parse_keys(settings.encryption_keys or "", "DEERFLOW_ENCRYPTION_KEYS")


def decryption_error(message: str) -> ApplicationError:
    return ApplicationError(message, type="PayloadDecryptionError", non_retryable=True)


class EncryptionCodec(PayloadCodec):
    """Encrypts every payload with the active key; decrypts with whichever key wrote it.

    Payloads that are not ``binary/encrypted`` pass through decoding unchanged: a client without
    the key (``temporal workflow start --input``) can still start a run in plaintext.
    """

    def __init__(self, keys: dict[str, bytes]) -> None:
        if not keys:
            raise EncryptionConfigError("EncryptionCodec needs at least one key")
        # cryptography is imported here, not with the module: every front door and worker imports this
        # module (its data converter), and one without keys, the default, never needs the library
        # (0.05-0.08 s of CPU at each command's start, issue #45).
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._active = next(iter(keys))
        self._nonce_key = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None,
                               info=NONCE_KEY_INFO).derive(keys[self._active])

    @property
    def active_key_id(self) -> str:
        return self._active

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encrypt(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(payload) if payload.metadata.get("encoding") == ENCODING else payload
                for payload in payloads]

    def seal_deterministic(self, payload: Payload) -> Payload:
        """Encrypt with a synthetic nonce, an HMAC of the plaintext, so equal payloads seal alike.

        For content-addressed subtree blobs (storage/subtrees.py): the same subtree then stays one
        blob across processes and restarts. GCM is only broken by one nonce on two different
        plaintexts; a nonce derived (under its own HKDF-derived key) from the plaintext repeats
        only with that plaintext, and then so does the ciphertext. What it reveals is which blobs
        are equal, which a deduplicating store reveals anyway. Decryption is the usual one.
        """
        plain = payload.SerializeToString()
        nonce = hmac.digest(self._nonce_key, plain, hashlib.sha256)[:NONCE_BYTES]
        return self._seal(plain, nonce)

    def _encrypt(self, payload: Payload) -> Payload:
        return self._seal(payload.SerializeToString(), os.urandom(NONCE_BYTES))

    def _seal(self, plain: bytes, nonce: bytes) -> Payload:
        key_id = self._active.encode()
        sealed = self._ciphers[self._active].encrypt(nonce, plain, key_id)
        return Payload(metadata={"encoding": ENCODING, KEY_ID_KEY: key_id, CIPHER_KEY: CIPHER}, data=nonce + sealed)

    def _decrypt(self, payload: Payload) -> Payload:
        key_id = payload.metadata.get(KEY_ID_KEY, b"").decode("utf-8", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise decryption_error(
                f"Payload encrypted with key id {key_id[:64]!r}, which is not among the configured keys "
                f"({', '.join(self._ciphers)}); add it to DEERFLOW_ENCRYPTION_KEYS (or the key file) of "
                "every worker, client and codec server")
        if payload.metadata.get(CIPHER_KEY, CIPHER) != CIPHER:
            raise decryption_error(f"Payload cipher {payload.metadata[CIPHER_KEY][:32]!r} is not AES-256-GCM")
        data = payload.data
        from cryptography.exceptions import InvalidTag  # loaded with the ciphers (see __init__)

        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], key_id.encode())
        except (InvalidTag, ValueError):
            raise decryption_error(
                f"Payload encrypted with key id {key_id!r} failed authentication: it was altered, "
                "or another key was configured under the same id") from None
        decrypted = Payload()
        decrypted.ParseFromString(plain)
        return decrypted


class KeylessGuard(PayloadCodec, WithSerializationContext):
    """The codec chain of a process without keys: refuses encrypted payloads, naming the setting.

    Without it, such a payload reaches the payload converter ("Unknown payload encoding
    binary/encrypted"), where it failed the run it belonged to. The refusal is not an
    ``ApplicationError``, so a worker's task fails and is retried (not counted against the run).
    """

    def __init__(self, inner: PayloadCodec | None, *, loud: bool = False) -> None:
        self._inner = inner
        self._loud = loud  # a worker logs each refusal; a client only raises (one line, from its caller)
        self._bound: dict[int, KeylessGuard] = {}

    def loud(self) -> KeylessGuard:
        """The same guard, logging each refusal as an error: the worker's."""
        return KeylessGuard(self._inner, loud=True)

    @property
    def inner(self) -> PayloadCodec | None:
        return self._inner

    def with_context(self, context: SerializationContext) -> Self:
        if not isinstance(self._inner, WithSerializationContext):
            return self
        inner = self._inner.with_context(context)
        if inner is self._inner:
            return self
        # The subtree codec answers with one of two bindings; so does this guard, made once each.
        bound = self._bound.get(id(inner))
        if bound is None or bound._inner is not inner:
            bound = self._bound[id(inner)] = KeylessGuard(inner, loud=self._loud)
        return bound  # type: ignore[return-value]

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self._inner.encode(payloads) if self._inner is not None else list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for payload in payloads:
            if payload.metadata.get("encoding") == ENCODING:
                key_id = payload.metadata.get(KEY_ID_KEY, b"").decode("utf-8", "replace")[:64]
                message = (f"An encrypted payload (key id {key_id!r}) reached a process without encryption keys: "
                           "set DEERFLOW_ENCRYPTION_KEYS (or DEERFLOW_ENCRYPTION_KEY_FILE) as on the other "
                           "workers; a worker leaves such a run to workers that have them")
                if self._loud:
                    logger.error("%s", message)
                raise EncryptionKeysMissing(message)
        return await self._inner.decode(payloads) if self._inner is not None else list(payloads)


def keys_summary(settings: Settings) -> str:
    """What a worker says at start about its keys: their ids (never the keys), or that it has none."""
    keys = configured_keys(settings)
    if not keys:
        return ("Encryption: no keys (DEERFLOW_ENCRYPTION_KEYS is not set): this worker leaves encrypted runs "
                "to workers that have the keys")
    ids = list(keys)
    return f"Encryption: key ids {ids[0]} (active)" + "".join(f", {key_id}" for key_id in ids[1:])


def encryption_codec(settings: Settings) -> EncryptionCodec | None:
    """The codec the operator's keys call for, or None when encryption is off (the default)."""
    keys = configured_keys(settings)
    return EncryptionCodec(keys) if keys else None
