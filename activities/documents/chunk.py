"""Cutting a document's text into passages, so a search hit points at the part that matters.

Why it is built this way:

* A whole document is too coarse a unit: BM25 over a 50-page PDF rewards length, and the
  agent would get the first 2,000 characters instead of the passage that matched. Passages of
  about :data:`CHUNK_CHARS` characters are small enough to be specific and large enough to carry
  their context.
* Cuts fall on the coarsest boundary that makes the pieces small enough: paragraphs (blank
  lines), then lines, then sentences (Western and CJK punctuation), then spaces, and only for
  a run with none of those (a base64 blob, a long CJK paragraph without punctuation) a hard cut.
* Chunks are spans of the original text, so the stored passage keeps its exact formatting.
  Each chunk after the first starts up to :data:`OVERLAP_CHARS` earlier, at a word boundary, so
  a sentence that straddles a cut can still be found whole in one of the two chunks.
"""

from __future__ import annotations

import itertools
import re

CHUNK_CHARS = 1500
OVERLAP_CHARS = 200

Span = tuple[int, int]

# Each boundary ends where the next piece starts, so pieces concatenate back to the text.
_BOUNDARIES = (
    re.compile(r"\n[ \t]*\n\s*"),  # paragraphs
    re.compile(r"\n"),  # lines
    re.compile(r"(?<=[.!?;:])\s+|(?<=[\u3002\uff01\uff1f\uff1b\uff1a])"),  # sentences, Western and CJK
    re.compile(r"\s+"),  # words
)
_SPACE = re.compile(r"\s")


def chunk_text(text: str, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS) -> list[str]:
    """The passages of ``text``: each at most ``size + overlap`` chars, blank ones dropped."""
    chunks: list[str] = []
    previous_start = 0
    for index, (start, end) in enumerate(split_spans(text, size)):
        begin = start if index == 0 else overlap_start(text, start, overlap, previous_start)
        previous_start = start
        passage = text[begin:end].strip()
        if passage:
            chunks.append(passage)
    return chunks


def split_spans(text: str, size: int) -> list[Span]:
    """Contiguous spans covering ``text``, each at most ``size`` chars, cut at natural boundaries."""
    if not text:
        return []
    return _spans(text, 0, len(text), max(size, 1), 0)


def _spans(text: str, start: int, end: int, size: int, level: int) -> list[Span]:
    """Split ``text[start:end]`` at boundary ``level`` (recursing into oversized pieces), then merge."""
    if end - start <= size:
        return [(start, end)]
    if level == len(_BOUNDARIES):
        return [(cut, min(cut + size, end)) for cut in range(start, end, size)]
    cuts = [match.end() for match in _BOUNDARIES[level].finditer(text, start, end) if start < match.end() < end]
    bounds = [start, *cuts, end]
    pieces: list[Span] = []
    for piece_start, piece_end in itertools.pairwise(bounds):
        pieces.extend(_spans(text, piece_start, piece_end, size, level + 1))
    return _merge(pieces, size)


def _merge(pieces: list[Span], size: int) -> list[Span]:
    """Join neighbouring pieces greedily while the result stays within ``size``."""
    merged: list[Span] = []
    for start, end in pieces:
        if merged and end - merged[-1][0] <= size:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def overlap_start(text: str, start: int, overlap: int, floor: int) -> int:
    """Where a chunk starting at ``start`` should begin to repeat up to ``overlap`` chars before it.

    Moves forward to just after the first whitespace, so the repeated text does not start in the
    middle of a word; text without spaces (CJK) is cut where it is. Never before ``floor``.
    """
    begin = max(start - overlap, floor, 0)
    space = _SPACE.search(text, begin, start)
    return space.end() if space else begin
