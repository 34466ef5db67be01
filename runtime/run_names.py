"""A run's name from its question: the first words, safe in a workflow id, a shell and a file name.

Shared by the CLI (``research-<slug>-<hex>``) and our page (``…page-<slug>-<hex>.1``, and its
downloads), so a run reads the same wherever it is listed.
"""

from __future__ import annotations

import re
import unicodedata

SLUG_CHARS = 40


def question_slug(question: str, limit: int = SLUG_CHARS, ascii_only: bool = False) -> str:
    """The question's first words, lower case, joined by dashes; "" when nothing is left.

    Letters of every script stay (a Chinese question gives a Chinese slug) unless ``ascii_only``
    (a DeerFlow thread id allows only ASCII); accents are dropped, and punctuation, symbols and
    control characters become dashes.
    """
    plain = "".join(c for c in unicodedata.normalize("NFKD", question[:4 * limit]) if not unicodedata.combining(c))
    words = re.sub(r"[^a-z0-9]+" if ascii_only else r"[\W_]+", "-", plain.lower())
    return words.strip("-")[:limit].strip("-")
