"""DeerFlow's Settings > RAG upload: a .md or .txt file from the page becomes a local resource, its
uploader's own.

The bytes are untrusted, so nothing about where or how they are stored comes from the request:
the folder is the operator's (``DEERFLOW_WEB_UPLOAD_DIR``, else ``uploads/`` in the first resource
root) and must lie under a resource root; the file name is reduced to a safe slug and never
replaces an existing file; the body is read up to a cap before it is parsed; the folder as a whole
has a cap too; and only UTF-8 text is kept. The researcher then reads it like any other document.

Tenancy: an upload is the token's that uploaded it. Each token's uploads go to a folder of its own
(``<upload folder>/<token name>/``); a token sees and may name in its runs only its own, and admins
see all (a file in the upload folder outside every token's, from before, is the admins' alone). A
shared team folder exists only where the operator sets one (``DEERFLOW_WEB_TEAM_UPLOAD_DIR``): then
uploads go there, and every token sees and may use them. The operator's other documents under the
resource roots are everyone's, as before. A folder named as a resource is searched recursively, so
a folder that holds other tokens' uploads is refused like the uploads themselves.
"""

from __future__ import annotations

import asyncio
import os
import re
import unicodedata
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from config.groups.web import Role
from config.resources import ResourcePolicy, resolve, uses_local_resources
from config.settings import Settings
from server.access import Principal
from server.security import RequestError, read_body
from workflows.research.document_names import local_uri

UPLOAD_SUFFIXES = (".md", ".txt")  # what DeerFlow's upload dialog offers
MULTIPART_OVERHEAD = 16 * 1024  # boundaries and part headers around the file
# The file system's limit on one name is in bytes (Linux NAME_MAX), and a name in CJK script takes
# three bytes a character: the stem is cut in UTF-8 bytes so that the longest name ever written,
# ``<stem>-<MAX_COPIES><suffix>``, fits.
NAME_MAX_BYTES = 255
MAX_COPIES = 999


def safe_name(filename: str) -> str:
    """A file name that is one plain path component, not hidden, with an upload suffix, that fits
    the file system with any copy number ``_write_new`` may add."""
    name = Path(filename.replace("\\", "/")).name
    stem, suffix = os.path.splitext(unicodedata.normalize("NFKC", name))
    suffix = suffix.lower()
    if suffix not in UPLOAD_SUFFIXES:
        raise RequestError(f"only {' and '.join(UPLOAD_SUFFIXES)} files can be uploaded", 415)
    budget = NAME_MAX_BYTES - len(f"-{MAX_COPIES}{suffix}".encode())
    slug = re.sub(r"[^\w.-]+", "-", stem).encode()[:budget].decode(errors="ignore")
    return (slug.strip("-.") or "document") + suffix


class Uploads:
    """Stores uploaded documents in their token's folder within the operator's limits, and says which
    documents each token may see and use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.policy = ResourcePolicy.from_settings(settings)
        default = self.policy.roots[0] / "uploads" if self.policy.roots else None
        self.private_area = _real(settings.web_upload_dir or default)
        self.team_folder = _real(settings.web_team_upload_dir)

    def folder(self, who: Principal) -> Path:
        """Where ``who``'s uploads go: the team folder, if the operator set one, else its own."""
        if not uses_local_resources(self.settings):
            raise RequestError(f"uploads become local resources; with RAG_PROVIDER={self.settings.rag_provider}, "
                               "add documents in that provider instead", 400)
        if self.team_folder is not None:
            folder, setting = self.team_folder, "DEERFLOW_WEB_TEAM_UPLOAD_DIR"
        elif self.private_area is not None:
            folder, setting = self.private_area / who.name, "DEERFLOW_WEB_UPLOAD_DIR"
        else:
            raise RequestError("uploads are off: no resource root is configured (DEERFLOW_RESOURCE_ROOTS)", 403)
        if not self.policy.allows(folder / "probe.md"):
            raise RequestError(f"uploads are off: {setting} ({folder}) is not inside a resource root "
                               "(DEERFLOW_RESOURCE_ROOTS), so the researcher could not read them", 403)
        return folder

    def may_use(self, path: Path, who: Principal) -> bool:
        """Whether ``who`` may see, and name in a run, the real ``path`` (a document or a folder)."""
        if who.role is Role.ADMIN or (self.team_folder is not None and path.is_relative_to(self.team_folder)):
            return True
        if self.private_area is None:
            return True
        if path.is_relative_to(self.private_area):
            return path.is_relative_to(self.private_area / who.name)
        return not self.private_area.is_relative_to(path)  # a folder holding every token's uploads

    def check_resources(self, resources: list[str], who: Principal) -> None:
        """Refuse a run whose ``resources`` name another token's upload (or a folder holding some)."""
        if not uses_local_resources(self.settings):
            return  # RAGFlow's rag:// URIs: its own datasets, not files here
        for resource in resources:
            path = resolve(self.policy.path_text(resource))
            if path is not None and not self.may_use(path, who):
                raise RequestError(f"resources: {resource[:300]!r} holds uploads of another token; a token may "
                                   "name only its own uploads (admins: all)", 403)

    async def store(self, request: Request, who: Principal) -> dict[str, str]:
        """Save the request's ``file`` part in ``who``'s folder; returns DeerFlow's Resource JSON for it."""
        folder = self.folder(who)
        limit = self.settings.web_upload_max_bytes
        body = await read_body(request, limit + MULTIPART_OVERHEAD, "DEERFLOW_WEB_UPLOAD_MAX_BYTES")
        try:
            form = await MultiPartParser(request.headers, _replay(body), max_files=1, max_fields=8).parse()
        except MultiPartException as error:
            raise RequestError(f"the upload is not a multipart form with one file: {error.message}") from error
        upload = form.get("file")
        if not isinstance(upload, UploadFile) or not upload.filename:
            raise RequestError("the form has no 'file' part")
        name = safe_name(upload.filename)
        content = await upload.read(limit + 1)
        await form.close()
        if not content:
            raise RequestError("the file is empty")
        if len(content) > limit:
            raise RequestError(f"the file is over {limit} bytes (DEERFLOW_WEB_UPLOAD_MAX_BYTES)", 413)
        try:
            content.decode("utf-8")
        except UnicodeDecodeError as error:
            raise RequestError("the file is not UTF-8 text") from error
        path = await asyncio.to_thread(self._save, folder, name, content)
        return self.listed(path)

    def listed(self, path: Path) -> dict[str, str]:
        """DeerFlow's Resource JSON for the real ``path`` below a root: a ``local://`` URI and the
        file's name, never the server's path (its settings list showed the URI; issue #49 §1)."""
        relative = self.policy.relative_path(path)
        return {"uri": local_uri(relative), "title": path.name, "description": relative}

    def _save(self, folder: Path, name: str, content: bytes) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        used = sum(entry.stat().st_size for entry in folder.iterdir() if entry.is_file())
        if used + len(content) > self.settings.web_upload_max_total_bytes:
            raise RequestError(f"the upload folder {folder} is full (DEERFLOW_WEB_UPLOAD_MAX_TOTAL_BYTES)", 507)
        return _write_new(folder, name, content)


def _real(folder: Path | None) -> Path | None:
    return folder.expanduser().resolve() if folder is not None else None


async def _replay(body: bytes) -> AsyncGenerator[bytes, None]:
    yield body


def _write_new(folder: Path, name: str, content: bytes) -> Path:
    """Write under ``name``, or ``name-2``, ``name-3``...: an upload never replaces a document.

    The bytes go to a hidden temporary file first (hidden files are never resources), which is
    then linked to its final name; ``link`` fails if that name exists, so two uploads of the same
    name at once both survive.
    """
    temporary = folder / f".upload-{uuid.uuid4().hex}"
    temporary.write_bytes(content)
    try:
        stem, suffix = os.path.splitext(name)
        for number in range(1, MAX_COPIES + 1):
            path = folder / (name if number == 1 else f"{stem}-{number}{suffix}")
            try:
                os.link(temporary, path)
            except FileExistsError:
                continue
            return path
        raise RequestError(f"too many uploads named {name!r}", 409)
    finally:
        temporary.unlink(missing_ok=True)
