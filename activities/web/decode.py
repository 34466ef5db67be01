"""Decoding a crawled body: its ``Content-Encoding`` (bounded, as it streams in), then its charset.

**Content-Encoding.** Why not let httpx decode: its decoders inflate each network chunk whole
(``decompress(data)`` without a bound), so 64 KB of gzip becomes up to 64 MB before anyone counts
it, and it decodes any coding it knows (zstd, br when their packages are installed, stacked
``gzip, gzip``) whether or not the client offered it. Here the crawler reads the raw bytes and
decodes them itself:

* Only the codings in :data:`OFFERED_ENCODINGS` are decoded, one layer at most. A response with
  any other coding, or with codings stacked, is refused by its header, before its body is read.
* ``zlib.decompressobj(...).decompress(data, max_length)`` yields at most :data:`PIECE_BYTES` at
  a time, keeping the rest of the input in ``unconsumed_tail``, so the caller can count every
  piece and stop at its cap with no more than one piece past it in memory.

**Charset** (:func:`decode_body`, run in the extraction child): the BOM, then the Content-Type
charset, then ``<meta charset>`` or the XML declaration, then a guess, then UTF-8; labels that
WHATWG treats as their supersets are decoded as the superset.
"""

from __future__ import annotations

import codecs
import re
import zlib
from collections.abc import Iterator

import charset_normalizer

# What the crawler sends as Accept-Encoding, and so all it will decode. brotli and zstd are left
# out: their decoders here either are not installed or cannot bound their output per call.
OFFERED_ENCODINGS = ("gzip", "deflate")
ACCEPT_ENCODING = ", ".join(OFFERED_ENCODINGS)
PIECE_BYTES = 64 * 1024
_IDENTITY = frozenset({"", "identity"})
_WBITS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


class EncodingRefused(Exception):
    """The response uses a content coding the crawler did not offer (or stacks them)."""


class BodyDecoder:
    """Incremental, bounded decoder for one response body (identity, gzip or deflate)."""

    def __init__(self, content_encoding: str) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c not in _IDENTITY]
        unknown = [c for c in codings if c not in _WBITS]
        if unknown:
            raise EncodingRefused(
                f"it is sent with Content-Encoding {', '.join(unknown)}, which the crawler did not offer "
                f"(it accepts {ACCEPT_ENCODING})"
            )
        if len(codings) > 1:
            raise EncodingRefused(
                f"it is sent with stacked Content-Encodings ({', '.join(codings)}); the crawler accepts one layer"
            )
        self._coding = codings[0] if codings else None
        self._inflater = zlib.decompressobj(_WBITS[self._coding]) if self._coding else None
        self._started = False

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of ``data``, in pieces of at most :data:`PIECE_BYTES`.

        Raises ``zlib.error`` on a corrupt stream. Bytes after the end of the compressed stream
        are ignored, as browsers do.
        """
        if self._inflater is None:
            yield from (data[at : at + PIECE_BYTES] for at in range(0, len(data), PIECE_BYTES))
            return
        if not self._started and data:
            self._started = True
            self._inflater = self._first_inflater(data)
        pending = data
        while not self._inflater.eof:
            piece = self._inflater.decompress(pending, PIECE_BYTES)
            pending = self._inflater.unconsumed_tail
            if piece:
                yield piece
            if not pending and len(piece) < PIECE_BYTES:  # input used up and no output held back
                return

    def _first_inflater(self, data: bytes) -> zlib._Decompress:
        """HTTP 'deflate' should be zlib-wrapped, but some servers send raw deflate; tell by trying."""
        assert self._inflater is not None
        if self._coding != "deflate":
            return self._inflater
        try:
            zlib.decompressobj(_WBITS["deflate"]).decompress(data[:2], 1)
        except zlib.error:
            return zlib.decompressobj(-zlib.MAX_WBITS)
        return self._inflater


# ------------------------------------------------------------------------------------ charset

META_SCAN_BYTES = 4096
# WHATWG treats these labels as their supersets; decoding with the strict codec garbles text.
CHARSET_SUPERSETS = {
    "iso-8859-1": "cp1252",
    "iso8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "us-ascii": "cp1252",
    "ascii": "cp1252",
    "gb2312": "gb18030",
    "gbk": "gb18030",
}
# (Blanks around the quote as r"\s*[\"']?\s*" would match them too, but split a run of blanks every way.)
_META_CHARSET = re.compile(rb"<meta[^>]*?charset\s*=\s*(?:[\"']\s*)?([a-z0-9_:.\-]+)", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"<\?xml[^>]*encoding\s*=\s*[\"']([a-z0-9_:.\-]+)", re.IGNORECASE)


def _codec(label: str | None) -> str | None:
    """A Python codec name for a charset label, or None if unknown."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    label = CHARSET_SUPERSETS.get(label, label)
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def _bom_codec(body: bytes) -> str | None:
    for bom, name in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if body.startswith(bom):
            return name
    return None


def _declared_in_document(body: bytes) -> str | None:
    head = body[:META_SCAN_BYTES]
    match = _first_in_tag(_META_CHARSET, head, b"<meta") or _first_in_tag(_XML_ENCODING, head, b"<?xml")
    return match.group(1).decode("ascii") if match else None


def _first_in_tag(pattern: re.Pattern[bytes], head: bytes, opener: bytes) -> re.Match[bytes] | None:
    """What ``pattern.search(head)`` finds, tried only at an ``opener`` (any case) that starts after
    the ">" ending the last one tried: a pattern that failed from one opener fails from every other
    before the same ">" (they see the same tag's rest), and ``pattern.search`` itself would scan from
    each of them again (quadratic in a page of "<meta")."""
    lowered, position = head.lower(), 0
    while (start := lowered.find(opener, position)) >= 0:
        if match := pattern.match(head, start):
            return match
        closing = head.find(b">", start)
        if closing < 0:
            return None
        position = closing + 1
    return None


def decode_body(body: bytes, header_charset: str | None) -> str:
    """Decode: BOM, then the Content-Type charset, then ``<meta charset>``, then a guess, then UTF-8."""
    for codec in (_bom_codec(body), _codec(header_charset), _codec(_declared_in_document(body))):
        if codec:
            return body.decode(codec, errors="replace")
    guess = charset_normalizer.from_bytes(body).best()
    if guess is not None and _codec(guess.encoding):
        return body.decode(guess.encoding, errors="replace")
    return body.decode("utf-8", errors="replace")
