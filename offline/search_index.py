"""The offline search corpus's index: tokenising (Latin words, CJK bigrams) and BM25 ranking.

Answers only with documents that are about the query (see :data:`MIN_COVERAGE`), so a question the
corpus does not cover gets no results rather than unrelated ones. The fake Tavily server
(:mod:`offline.search_server`) serves it; the scripted agents use :func:`tokenize` to pick queries.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_CORPUS = Path(__file__).with_name("corpus.json")
DEFAULT_MAX_RESULTS = 5  # Tavily's default when the request names none
TITLE_WEIGHT = 2  # title tokens are counted this many times: a title match means more
# A document is an answer only if it contains this share of the query's subject: the query's terms
# that some title uses or that no document uses, weighted by rarity. Words the corpus only uses in
# passing ("causes", "history") frame a question, so "What causes inflation?" is about inflation,
# and "the Roman Empire" finds nothing instead of whatever mentions history.
MIN_COVERAGE = 0.5
# ...and must score at least this share of the best answer's BM25: a page that merely uses the same
# words ("electric", "battery" in a solar page) does not ride along with the pages about the subject.
MIN_SHARE_OF_BEST = 1 / 3

# Latin letters/digits form words; CJK, kana and Hangul runs are split into character bigrams,
# because those scripts do not separate words with spaces.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN_RE = re.compile(rf"[a-z0-9]+|[{_CJK}]+")
_CJK_RE = re.compile(rf"[{_CJK}]")
_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "has",
        "have", "how", "i", "in", "is", "it", "its", "of", "on", "or", "that", "the", "their", "them",
        "there", "these", "this", "to", "was", "what", "when", "where", "which", "who", "why", "will",
        "with", "you", "your",
        # Words that frame a question rather than name its subject.
        "about", "all", "any", "back", "been", "being", "between", "but", "compare", "compared",
        "could", "did", "far", "get", "into", "kind", "make", "many", "more", "most", "much", "my",
        "not", "our", "should", "so", "some", "than", "they", "up", "us", "very", "vs", "we", "were",
        "would", "work", "tell", "explain", "current", "today", "new", "prospect", "future", "see",
    }
)  # fmt: skip


def _stem(word: str) -> str:
    """Fold simple English plurals so "batteries" finds "battery" and "rovers" finds "rover"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _cjk_bigrams(run: str) -> Iterator[str]:
    """Overlapping character pairs: the usual cheap stand-in for CJK word segmentation."""
    if len(run) == 1:
        yield run
        return
    for i in range(len(run) - 1):
        yield run[i : i + 2]


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens (stop words dropped, plurals folded) plus CJK bigrams."""
    tokens: list[str] = []
    for match in _TOKEN_RE.finditer(text.lower()):
        run = match.group()
        if _CJK_RE.match(run):
            tokens.extend(_cjk_bigrams(run))
        elif run not in _STOPWORDS and _stem(run) not in _STOPWORDS:  # "prospects" is "prospect"
            tokens.append(_stem(run))
    return tokens


@dataclass(frozen=True)
class Document:
    """One corpus entry, as stored in ``corpus.json``."""

    title: str
    url: str
    content: str
    published_date: str | None = None
    # What the document is about, for the corpus's own relevance checks; never sent to clients.
    topics: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hit:
    """A ranked document; ``score`` is squashed into (0, 1) like Tavily's relevance score."""

    document: Document
    score: float


@dataclass
class SearchIndex:
    """Okapi BM25 over title+content: good enough to make the demo's answers relevant."""

    documents: list[Document]
    k1: float = 1.5
    b: float = 0.75
    _term_counts: list[Counter[str]] = field(init=False, repr=False)
    _lengths: list[int] = field(init=False, repr=False)
    _idf: dict[str, float] = field(init=False, repr=False)
    _title_terms: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._term_counts = [Counter(self._document_tokens(doc)) for doc in self.documents]
        self._lengths = [sum(counts.values()) for counts in self._term_counts]
        document_frequency: Counter[str] = Counter()
        for counts in self._term_counts:
            document_frequency.update(counts.keys())
        total = len(self.documents)
        self._idf = {term: math.log(1 + (total - df + 0.5) / (df + 0.5)) for term, df in document_frequency.items()}
        self._title_terms = frozenset(term for doc in self.documents for term in tokenize(doc.title))

    @classmethod
    def from_file(cls, path: Path) -> SearchIndex:
        """Load a JSON list of ``{title, url, content, published_date?}`` objects."""
        raw = json.loads(path.read_text(encoding="utf-8"))
        return cls([Document(**{**entry, "topics": tuple(entry.get("topics", ()))}) for entry in raw])

    @staticmethod
    def _document_tokens(doc: Document) -> list[str]:
        return tokenize(doc.title) * TITLE_WEIGHT + tokenize(doc.content)

    def _bm25(self, index: int, query_terms: Iterable[str]) -> float:
        counts = self._term_counts[index]
        average_length = sum(self._lengths) / max(len(self._lengths), 1)
        norm = self.k1 * (1 - self.b + self.b * self._lengths[index] / average_length)
        score = 0.0
        for term in query_terms:
            frequency = counts.get(term, 0)
            if frequency:
                score += self._idf[term] * frequency * (self.k1 + 1) / (frequency + norm)
        return score

    def _subject_weight(self, term: str) -> float:
        """How much ``term`` names the query's subject (see :data:`MIN_COVERAGE`).

        CJK bigrams are all counted (a question's bigrams cannot be told from its words), but an
        unknown one only half, since many straddle two words ("能看") and name nothing.
        """
        unknown = math.log(1 + (len(self.documents) + 0.5) / 0.5)  # the idf of a term no document has
        cjk = bool(_CJK_RE.match(term))
        if term not in self._idf:
            return unknown / 2 if cjk else unknown
        return self._idf[term] if cjk or term in self._title_terms else 0.0

    def _coverage(self, index: int, query_terms: set[str]) -> float:
        """The share of the query's subject this document contains (see :data:`MIN_COVERAGE`)."""
        weights = {term: self._subject_weight(term) for term in query_terms}
        total = sum(weights.values())
        found = sum(weight for term, weight in weights.items() if term in self._term_counts[index])
        return found / total if total else 0.0

    def search(
        self,
        query: str,
        max_results: int = DEFAULT_MAX_RESULTS,
        include_domains: Iterable[str] = (),
        exclude_domains: Iterable[str] = (),
    ) -> list[Hit]:
        """Best ``max_results`` documents about the query: none when the corpus does not cover it."""
        terms = set(tokenize(query))
        include, exclude = list(include_domains), list(exclude_domains)
        hits: list[tuple[float, Document]] = []
        for index, doc in enumerate(self.documents):
            if not _domain_allowed(doc.url, include, exclude) or self._coverage(index, terms) < MIN_COVERAGE:
                continue
            score = self._bm25(index, terms)
            if score > 0:
                hits.append((score, doc))
        best = max((score for score, _ in hits), default=0.0)
        ranked = sorted((h for h in hits if h[0] >= best * MIN_SHARE_OF_BEST), key=lambda h: h[0], reverse=True)
        return [Hit(doc, round(score / (score + 5.0), 5)) for score, doc in ranked[:max_results]]


def _domain_allowed(url: str, include: list[str], exclude: list[str]) -> bool:
    """Tavily's include/exclude_domains: a domain matches itself and its subdomains."""
    host = (urlsplit(url).hostname or "").lower()

    def matches(domain: str) -> bool:
        domain = domain.lower().lstrip(".")
        return host == domain or host.endswith("." + domain)

    if include and not any(matches(d) for d in include):
        return False
    return not any(matches(d) for d in exclude)
