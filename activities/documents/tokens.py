"""How text is cut into search terms, the one contract the document index and its queries share.

Why this exists:

* SQLite's ``unicode61`` tokenizer splits on spaces and punctuation only, so a run of Chinese or
  Japanese with no spaces would become one giant token and no query could match inside it.
  :func:`segment` rewrites every CJK run as overlapping bigrams (``量子计算`` -> ``量子 子计 计算``),
  the classic CJK analyzer approach: any two-character word is then a token, and a longer word
  is a run of bigrams BM25 rewards for matching together. The same function runs on indexed
  text and on queries, so both sides always agree.
* User queries are untrusted text, and FTS5's MATCH language treats ``"``, ``*``, ``(``, ``:``,
  ``^`` and the words AND/OR/NOT/NEAR as syntax. :func:`match_expression` never passes any of it
  through: it keeps only word characters, quotes every term as a string (inside which FTS5 has
  no syntax) and ORs them, so any input is a valid expression and BM25 does the ranking.
"""

from __future__ import annotations

import re

# Han (with extensions and compatibility forms), kana, bopomofo and Hangul. CJK punctuation
# (U+3000-U+303F) is left out on purpose: it separates words like any other punctuation.
_CJK = (
    "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_CJK_CHAR = re.compile(f"[{_CJK}]")
_TERM = re.compile(r"[^\W_]+")  # letters and digits; everything else separates terms

# Enough for any real question; bounds the cost of a pasted paragraph.
MAX_QUERY_TERMS = 64


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping character pairs of a CJK run; a lone character stays itself."""
    if len(run) < 2:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def segment(text: str) -> str:
    """``text`` with each CJK run replaced by its space-separated bigrams; other text untouched."""
    return _CJK_RUN.sub(lambda match: " " + " ".join(cjk_bigrams(match.group())) + " ", text)


def query_terms(query: str) -> list[str]:
    """The distinct search terms of a query, in order, lower-cased, at most MAX_QUERY_TERMS."""
    terms: list[str] = []
    seen: set[str] = set()
    for term in _TERM.findall(segment(query)):
        key = term.lower()
        if key not in seen:
            seen.add(key)
            terms.append(key)
    return terms[:MAX_QUERY_TERMS]


def match_expression(query: str) -> str | None:
    """A safe FTS5 MATCH expression ORing the query's terms; None when the query has none.

    A lone CJK character is matched as a prefix, since the index holds it only inside bigrams.
    """
    parts = []
    for term in query_terms(query):
        quoted = '"' + term.replace('"', '""') + '"'  # no quote survives _TERM; doubled anyway
        parts.append(quoted + "*" if len(term) == 1 and _CJK_CHAR.match(term) else quoted)
    return " OR ".join(parts) or None
