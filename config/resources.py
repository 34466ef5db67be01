"""Which files a run's ``resources`` may name: only documents of a readable format under an
operator-configured root.

Why it is built this way:

* A request is untrusted, and ``resources`` used to name any file the worker could read, so a
  private file could reach the model, the history and the report. Only the operator decides
  which folders hold documents (``DEERFLOW_RESOURCE_ROOTS``, default ``<DEERFLOW_HOME>/resources``).
* Containment is checked on the *real* path (``..``, relative parts and symlinks resolved), so a
  symlink inside a root that points outside it is refused like the file it points at.
* Some places are never resources, whatever the roots: the worker's state (``DEERFLOW_HOME``:
  dev-server database, blobs, index), its code (the repository), its ``conf.yaml`` and
  ``/proc`` (``/proc/self/environ`` holds the worker's secrets). A root configured *inside*
  one of them (the default root is inside the home) still works; a root that contains one
  does not open it. Hidden files and folders below a root are refused too, as the folder walk
  skips them.
* The same policy is asked by the run's start (``load_run_config``), by every search
  (``local_search_tool``) and by the CLI before it starts a run, so all three give one message.
  The API server lists and stores documents by it too, so it lives here, beside the settings,
  and not in the worker's code (the front doors import none).
* Only formats whose text can be read reliably are documents (:data:`SUPPORTED_SUFFIXES`); the
  extraction (activities/documents/extract.py) reads them, the API server lists only them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from workflows.research.document_names import LOCAL_SCHEME
from workflows.text.untrusted_text import encodes_as_utf8

if TYPE_CHECKING:  # the extraction fork server imports the suffix sets through here: no settings there
    from config.settings import Settings

REPOSITORY = Path(__file__).resolve().parents[1]
ALWAYS_PROTECTED = (Path("/proc"),)
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
SUPPORTED_SUFFIXES = frozenset({*MARKDOWN_SUFFIXES, *HTML_SUFFIXES, ".txt", ".pdf"})
# RAG_PROVIDER's default: resources are files under the roots (any other retriever takes URIs).
LOCAL_RETRIEVER = "local"


@dataclass(frozen=True)
class ResourcePolicy:
    """The roots resources must be under, and the places that are never resources."""

    roots: tuple[Path, ...]
    protected: tuple[Path, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> ResourcePolicy:
        protected = (settings.home, REPOSITORY, settings.conf_path, *ALWAYS_PROTECTED)
        return cls(
            roots=tuple(settings.allowed_resource_roots()),
            protected=tuple(path.expanduser().resolve() for path in protected),
        )

    def allows(self, path: Path) -> bool:
        """Whether the real (resolved) ``path`` may be read as a resource."""
        return any(self._allowed_under(root, path) for root in self.roots)

    def _allowed_under(self, root: Path, path: Path) -> bool:
        if not path.is_relative_to(root):
            return False
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            return False
        # A protected place is closed unless the root itself lies strictly inside it.
        return not any(path.is_relative_to(place) and not _strictly_inside(root, place) for place in self.protected)

    def may_hold_allowed_files(self, folder: Path) -> bool:
        """Whether walking the real ``folder`` could find an allowed file (prunes the walk)."""
        return self.allows(folder) or any(root.is_relative_to(folder) for root in self.roots)

    def path_text(self, resource: str) -> str:
        """The path a local resource names, as text: a path as given, a ``file://`` URI's path with
        its %-escapes undone, or a ``local://`` URI (what the API server lists: no server path in
        DeerFlow's UI or our page) below the first root that holds it. The worker reads this path and
        the API server checks the same one; either still asks :meth:`allows` of its real path, so a
        ``..`` in a URI leaves no root."""
        text = resource.strip()
        if text.lower().startswith("file://"):
            return url2pathname(urlparse(text).path)
        if not text.lower().startswith(LOCAL_SCHEME):
            return text
        relative = unquote(text[len(LOCAL_SCHEME):]).lstrip("/")
        if not relative or not self.roots:
            return ""
        candidates = [root / relative for root in self.roots]
        return str(next((path for path in candidates if os.path.exists(path)), candidates[0]))

    def relative_path(self, path: Path) -> str:
        """The real ``path`` below the first root holding it, as a POSIX path (what ``local://`` names)."""
        root = next(root for root in self.roots if path.is_relative_to(root))
        return path.relative_to(root).as_posix()

    def refusal(self, resource: str) -> str:
        """The message for a refused resource: what it was, where resources may be, what to do."""
        roots = ", ".join(str(root) for root in self.roots) or "none configured"
        return (
            f"Resource {resource!r} is outside the worker's resource roots ({roots}), so it cannot be "
            "used. Copy it under one of them, or add its folder to DEERFLOW_RESOURCE_ROOTS (or "
            "RESOURCE_ROOTS in conf.yaml) on the worker and restart it. Hidden files and the worker's "
            "own state, code and configuration are never resources."
        )


def uses_local_resources(settings: Settings) -> bool:
    """Whether resources are files under the resource roots (the local retriever), not RAGFlow URIs."""
    return (settings.rag_provider.strip().lower() or LOCAL_RETRIEVER) == LOCAL_RETRIEVER


def resolve(text: str) -> Path | None:
    """The absolute, symlink-free path ``text`` names (it need not exist); None for a symlink loop."""
    try:
        return Path(text).expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop, or an unreadable parent
        return None


def _strictly_inside(path: Path, place: Path) -> bool:
    return path != place and path.is_relative_to(place)


def utf8_named(path: Path) -> bool:
    """Whether ``path`` is UTF-8. A name of other bytes (a Latin-1 archive's "caf\\xe9.md") reaches
    Python as lone surrogates, which neither the document index (SQLite's text), a search result nor
    a JSON response can hold: a search failed with UnicodeEncodeError on every attempt, and the API
    server's listing of documents answered 500. Such a file is skipped."""
    return encodes_as_utf8(str(path))
