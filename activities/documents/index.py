"""The local document index: an embedded SQLite FTS5 store under ``DEERFLOW_HOME``.

Why it is built this way:

* **Embedded, no service.** SQLite ships with Python and FTS5 gives BM25 ranking (``bm25()``),
  which is all keyword retrieval over a user's own files needs; the store is one file,
  ``<home>/documents.sqlite3``. It is a cache of the files: deleting it only costs a re-index,
  and a schema change simply rebuilds it (``PRAGMA user_version``).
* **Passages, not files.** Text is stored as chunks (:mod:`activities.documents.chunk`); the FTS row of
  a chunk has the same rowid as the chunk, so a hit leads straight to its passage and file.
  The FTS table holds the text as segmented by :mod:`activities.documents.tokens` (CJK as bigrams),
  the ``chunks`` table the original passage that is shown to the agent.
* **Incremental by content hash.** Every sync reads and hashes each file (cheap next to
  extraction); a file whose sha256 is unchanged is not extracted again, a changed one has its
  chunks replaced, and a document under a re-indexed folder whose file is gone is dropped.
* **Safe under concurrency.** Several activities, in one worker or many, may sync at once: WAL
  lets readers run beside the single writer, each file is written in its own short
  ``BEGIN IMMEDIATE`` transaction (which waits up to :data:`BUSY_TIMEOUT_SECONDS` for another
  writer) and re-checks the stored hash inside it, so two workers racing on one file write it
  once and the slow part, extraction, happens outside any lock.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from activities.documents import extract as doc_extract
from activities.documents.chunk import chunk_text
from activities.documents.tokens import match_expression, segment
from config.settings import Settings

log = logging.getLogger(__name__)

DB_FILENAME = "documents.sqlite3"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_SECONDS = 30.0
MAX_FILE_BYTES = 64 * 1024 * 1024  # larger files are skipped: reading them whole would cost too much memory
TITLE_WEIGHT = 2.0  # a query word in the title counts twice as much as one in the passage
BODY_WEIGHT = 1.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS documents (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,      -- absolute path of the file
        sha256 TEXT NOT NULL,           -- of the bytes last indexed
        title TEXT NOT NULL,
        error TEXT,                     -- why extraction failed (then it has no chunks)
        indexed_at REAL NOT NULL        -- unix time
    )""",
    """CREATE TABLE IF NOT EXISTS chunks (
        id INTEGER PRIMARY KEY,         -- also the rowid of its chunk_fts row
        document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
        ordinal INTEGER NOT NULL,       -- 1-based position in the document
        content TEXT NOT NULL,          -- the passage as written
        UNIQUE (document_id, ordinal)
    )""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS chunk_fts USING fts5(
        title, body, tokenize = 'unicode61 remove_diacritics 2'
    )""",
)
_DROP = ("DROP TABLE IF EXISTS chunk_fts", "DROP TABLE IF EXISTS chunks", "DROP TABLE IF EXISTS documents")

_SEARCH = f"""
    SELECT d.path, d.title, c.ordinal, c.content, bm25(chunk_fts, {TITLE_WEIGHT}, {BODY_WEIGHT}) AS rank
    FROM chunk_fts
    JOIN chunks AS c ON c.id = chunk_fts.rowid
    JOIN documents AS d ON d.id = c.document_id
    WHERE chunk_fts MATCH ? AND c.document_id IN (SELECT value FROM json_each(?))
    ORDER BY rank
    LIMIT ?
"""


class StoreUnavailable(RuntimeError):
    """The store cannot work on this worker (its SQLite lacks FTS5)."""


@dataclass(frozen=True)
class Hit:
    """One matching passage."""

    path: str
    title: str
    ordinal: int
    content: str
    score: float  # -bm25: higher is better


@dataclass
class SyncReport:
    """What one sync did; ``document_ids`` are the documents the files map to, for searching."""

    document_ids: list[int] = field(default_factory=list)
    extracted: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: int = 0  # unreadable or too large
    failed: int = 0  # extraction failed; recorded so it is not retried until the file changes


@functools.cache
def fts5_available() -> bool:
    """Whether this Python's sqlite3 has FTS5 (checked once, in memory)."""
    with closing(sqlite3.connect(":memory:")) as conn:
        try:
            conn.execute("CREATE VIRTUAL TABLE probe USING fts5(body)")
        except sqlite3.OperationalError:
            return False
    return True


class DocumentStore:
    """The index file at ``path``; every call opens its own connection, so any thread may use it."""

    def __init__(self, path: Path, settings: Settings) -> None:
        self.path = path
        self.settings = settings  # extraction's limits

    def sync(self, files: Sequence[Path], folders: Sequence[Path]) -> SyncReport:
        """Bring the index up to date with ``files`` (found under ``folders`` or named directly)."""
        report = SyncReport()
        with self._connect() as conn:
            known = _known_documents(conn, files, folders)
            for path in files:
                document_id = self._sync_file(conn, path, known.get(str(path)), report)
                if document_id is not None:
                    report.document_ids.append(document_id)
            report.removed = _drop_vanished(conn, known, folders)
        return report

    def search(self, query: str, document_ids: Sequence[int], limit: int) -> list[Hit]:
        """The best ``limit`` passages of the given documents for ``query``, by BM25."""
        expression = match_expression(query)
        if expression is None or not document_ids or limit <= 0:
            return []
        with self._connect() as conn:
            rows = conn.execute(_SEARCH, (expression, json.dumps(list(document_ids)), limit)).fetchall()
        return [Hit(path, title, ordinal, content, round(-rank, 6)) for path, title, ordinal, content, rank in rows]

    def _sync_file(
        self, conn: sqlite3.Connection, path: Path, known: tuple[int, str] | None, report: SyncReport
    ) -> int | None:
        """The document id of ``path`` after (re-)indexing it if its content changed."""
        data = _read(path)
        if data is None:
            report.skipped += 1
            return None
        digest = hashlib.sha256(data).hexdigest()
        if known is not None and known[1] == digest:
            report.unchanged += 1
            return known[0]
        try:
            document = doc_extract.extract_document(path, data, self.settings)
        except Exception as exc:  # a broken file must not fail the search over the others
            log.warning("Could not extract %s: %s", path, exc)
            report.failed += 1
            return _write(conn, str(path), digest, path.name, [], f"{type(exc).__name__}: {exc}")
        report.extracted += 1
        return _write(conn, str(path), digest, document.title, chunk_text(document.text), None)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection in autocommit mode (transactions are explicit), WAL, schema in place."""
        if not fts5_available():
            raise StoreUnavailable("This Python's sqlite3 has no FTS5 module, which the document index needs.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)) as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL stays consistent; a power cut may lose the last writes
            conn.execute("PRAGMA foreign_keys = ON")
            _ensure_schema(conn)
            yield conn


# ---------------------------------------------------------------- helpers


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the write lock up front (waiting for other writers)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the tables, or rebuild them when they were made by another schema version."""
    if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
        return
    with _immediate(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another worker may have won
        if version == SCHEMA_VERSION:
            return
        if version != 0:
            log.info("Rebuilding the document index (schema %s -> %s)", version, SCHEMA_VERSION)
            for statement in _DROP:
                conn.execute(statement)
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def folder_range(folder: Path) -> tuple[str, str]:
    """(low, high) such that ``low <= path < high`` holds exactly for paths under ``folder``.

    A range on the unique index, rather than LIKE, so ``%`` and ``_`` in names mean nothing.
    """
    low = str(folder).rstrip(os.sep) + os.sep
    return low, low[:-1] + chr(ord(os.sep) + 1)


def _known_documents(
    conn: sqlite3.Connection, files: Sequence[Path], folders: Sequence[Path]
) -> dict[str, tuple[int, str]]:
    """path -> (id, sha256) of every indexed document among ``files`` or under ``folders``."""
    known: dict[str, tuple[int, str]] = {}
    for folder in folders:
        rows = conn.execute("SELECT path, id, sha256 FROM documents WHERE path >= ? AND path < ?", folder_range(folder))
        known.update((path, (doc_id, digest)) for path, doc_id, digest in rows)
    paths = json.dumps([str(path) for path in files])
    rows = conn.execute(
        "SELECT path, id, sha256 FROM documents WHERE path IN (SELECT value FROM json_each(?))", (paths,)
    )
    known.update((path, (doc_id, digest)) for path, doc_id, digest in rows)
    return known


def _read(path: Path) -> bytes | None:
    """The file's bytes, or None (logged) when it is too large or cannot be read.

    ``path`` is the real path the resource roots were checked on, so it is opened without
    following a symlink: one swapped in since the check is refused (ELOOP), not followed. It
    is opened non-blocking and must be a regular file, so a FIFO cannot hang the activity.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        with open(os.open(path, flags), "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                log.warning("Skipping %s: not a regular file", path)
                return None
            if info.st_size > MAX_FILE_BYTES:
                log.warning("Skipping %s: larger than %d MB", path, MAX_FILE_BYTES // (1024 * 1024))
                return None
            return file.read()
    except OSError as exc:  # vanished, unreadable or replaced by a symlink since the scan
        log.warning("Skipping %s: %s", path, exc)
        return None


def _write(conn: sqlite3.Connection, path: str, digest: str, title: str, chunks: list[str], error: str | None) -> int:
    """Store one document's chunks in place of its old ones, in one transaction; its id."""
    with _immediate(conn):
        row = conn.execute("SELECT id, sha256 FROM documents WHERE path = ?", (path,)).fetchone()
        if row is not None and row[1] == digest:  # another worker indexed this content meanwhile
            return int(row[0])
        if row is None:
            document_id = _insert_document(conn, path, digest, title, error)
        else:
            document_id = int(row[0])
            _delete_chunks(conn, document_id)
            conn.execute(
                "UPDATE documents SET sha256 = ?, title = ?, error = ?, indexed_at = ? WHERE id = ?",
                (digest, title, error, time.time(), document_id),
            )
        _insert_chunks(conn, document_id, f"{title} {Path(path).stem}", chunks)
    return document_id


def _insert_document(conn: sqlite3.Connection, path: str, digest: str, title: str, error: str | None) -> int:
    cursor = conn.execute(
        "INSERT INTO documents (path, sha256, title, error, indexed_at) VALUES (?, ?, ?, ?, ?)",
        (path, digest, title, error, time.time()),
    )
    return int(cursor.lastrowid or 0)


def _insert_chunks(conn: sqlite3.Connection, document_id: int, title: str, chunks: list[str]) -> None:
    """Each chunk into ``chunks`` and, segmented, into ``chunk_fts`` under the same rowid."""
    title_terms = segment(title)
    for ordinal, passage in enumerate(chunks, start=1):
        cursor = conn.execute(
            "INSERT INTO chunks (document_id, ordinal, content) VALUES (?, ?, ?)", (document_id, ordinal, passage)
        )
        conn.execute(
            "INSERT INTO chunk_fts (rowid, title, body) VALUES (?, ?, ?)",
            (cursor.lastrowid, title_terms, segment(passage)),
        )


def _delete_chunks(conn: sqlite3.Connection, document_id: int) -> None:
    conn.execute("DELETE FROM chunk_fts WHERE rowid IN (SELECT id FROM chunks WHERE document_id = ?)", (document_id,))
    conn.execute("DELETE FROM chunks WHERE document_id = ?", (document_id,))


def _drop_vanished(conn: sqlite3.Connection, known: dict[str, tuple[int, str]], folders: Sequence[Path]) -> int:
    """Drop documents under ``folders`` whose file no longer exists; how many were dropped."""
    ranges = [folder_range(folder) for folder in folders]
    vanished = [
        doc_id
        for path, (doc_id, _) in known.items()
        if any(low <= path < high for low, high in ranges) and not os.path.isfile(path)
    ]
    if vanished:
        with _immediate(conn):
            for document_id in vanished:
                _delete_chunks(conn, document_id)
                conn.execute("DELETE FROM documents WHERE id = ?", (document_id,))
    return len(vanished)
