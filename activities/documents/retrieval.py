"""The ``local_search_tool`` activity: search the run's ``resources`` (DeerFlow's local documents / RAG).

Why it is built this way:

* Retrieval backends sit behind one small :class:`Retriever` protocol, selected by
  ``RAG_PROVIDER``: ``local`` (default) indexes files and folders on the worker into an
  embedded SQLite FTS5 store (:mod:`activities.documents.index`); ``ragflow`` asks a RAGFlow server
  through its HTTP retrieval API, with resources as DeerFlow's ``rag://dataset/<id>`` URIs.
* Local resources are checked before any work. A path outside the operator's resource roots
  (:mod:`config.resources`; checked on the real path, so ``..`` and symlinks cannot
  escape) fails with a non-retryable ``ResourceOutsideRoots`` before the file is even looked
  for, so the error says nothing about what exists outside. A path that does not exist is a
  mistake only a human can fix, so it fails at once with a non-retryable ``ResourceNotFound``.
  Folders are walked recursively (hidden entries skipped); a file found there whose real path
  leaves the roots (a symlink) is skipped with a warning, and files are indexed under their
  real path; files of unsupported types are skipped with a debug log. Extraction and indexing
  are CPU and disk work, so they run in a thread while the activity heartbeats.
* RAGFlow failures are sorted like ``web_search``'s so the retry policy can act on them:
  ``RetrievalRateLimited`` (retryable after the server's ``Retry-After``), ``RetrievalUnavailable``
  (retryable: 5xx, timeouts, connection failures, server exceptions) and ``RetrievalConfigError``
  (non-retryable: missing or rejected key, forbidden dataset, malformed resource). RAGFlow reports
  most errors as HTTP 200 with a non-zero ``code`` (e.g. 109 for an invalid key), so both the HTTP
  status and the body's code are checked.
* Results are trimmed like search results (``SEARCH_CONTENT_CHARS``) because they are stored in
  workflow history.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.documents import extract as doc_extract
from activities.documents.index import DB_FILENAME, DocumentStore, Hit, StoreUnavailable
from activities.support.pooled_http import pooled_client
from activities.support.provider_registry import ProviderRegistry
from activities.support.retry_pacing import paced_retries
from activities.web.search import parse_retry_after, trim_response
from config.resources import LOCAL_RETRIEVER, ResourcePolicy, resolve, uses_local_resources, utf8_named
from config.settings import Settings
from runtime.heartbeat import heartbeating
from workflows.contracts.tool_activities import LocalSearchRequest, SearchResponse, SearchResult
from workflows.research.document_names import LOCAL_SCHEME, passage_address

log = logging.getLogger(__name__)

RESOURCE_NOT_FOUND = "ResourceNotFound"
RESOURCE_TOO_LARGE = "ResourceTooLarge"
RESOURCE_OUTSIDE_ROOTS = "ResourceOutsideRoots"
RATE_LIMITED = "RetrievalRateLimited"
UNAVAILABLE = "RetrievalUnavailable"
CONFIG_ERROR = "RetrievalConfigError"

MAX_FILES = 10_000  # supported files per search: more means a resource was picked by mistake
MAX_WALK_ENTRIES = 200_000  # directory entries looked at per search, supported or not


# ---------------------------------------------------------------- errors


def config_error(message: str) -> ApplicationError:
    """A mistake only a human can fix (key, URL, resource format): retrying cannot help."""
    return ApplicationError(message, type=CONFIG_ERROR, non_retryable=True)


def unavailable_error(message: str) -> ApplicationError:
    """A transient failure of the retriever or the network: Temporal's backoff retries it."""
    return ApplicationError(message, type=UNAVAILABLE)


def rate_limited_error(message: str, response: httpx.Response) -> ApplicationError:
    """Retryable, but not before the server's ``Retry-After`` (when it sent one)."""
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    return ApplicationError(message, type=RATE_LIMITED, next_retry_delay=retry_after)


def resource_not_found(resource: str, path: Path | None = None) -> ApplicationError:
    """A resource that is not on the worker: the request must change, so not retryable."""
    where = f" (looked for {path})" if path is not None and str(path) != resource else ""
    return ApplicationError(
        f"Resource not found on the worker: {resource!r}{where}. Resources must be files or folders "
        "the worker can read.",
        type=RESOURCE_NOT_FOUND,
        non_retryable=True,
    )


def resource_outside_roots(resource: str, policy: ResourcePolicy) -> ApplicationError:
    """A resource the operator has not allowed: the request must change, so not retryable."""
    return ApplicationError(policy.refusal(resource), type=RESOURCE_OUTSIDE_ROOTS, non_retryable=True)


def resource_too_large(resource: Path, what: str) -> ApplicationError:
    return ApplicationError(
        f"Resource {str(resource)!r} has more than {what}; name a narrower folder.",
        type=RESOURCE_TOO_LARGE,
        non_retryable=True,
    )


# ---------------------------------------------------------------- retriever registry


class Retriever(Protocol):
    """One retrieval backend: the passages of ``request.resources`` that best match its query.

    Raises only the ApplicationError types above for failures it understands; anything else
    propagates and Temporal retries it. Results may be untrimmed; the activity trims them.
    """

    async def retrieve(self, request: LocalSearchRequest) -> SearchResponse:
        """Search within ``request.resources``, best first, at most ``request.max_results``."""
        ...


RETRIEVERS: ProviderRegistry[Retriever] = ProviderRegistry("RAG_PROVIDER", "retriever", LOCAL_RETRIEVER, config_error)
register_retriever = RETRIEVERS.register
supported_retrievers = RETRIEVERS.names


def get_retriever(settings: Settings) -> Retriever:
    """The retriever ``settings.rag_provider`` names; an unknown name is a configuration error."""
    return RETRIEVERS.create(settings.rag_provider, settings)


# ---------------------------------------------------------------- local files


@dataclass(frozen=True)
class LocalResources:
    """What a search covers: every supported file (deduplicated, in order) and the folders walked."""

    files: list[Path]
    folders: list[Path]


@register_retriever(LOCAL_RETRIEVER)
class LocalRetriever:
    """Files and folders on the worker, indexed into ``<DEERFLOW_HOME>/documents.sqlite3``."""

    def __init__(self, settings: Settings) -> None:
        self.store = DocumentStore(settings.home / DB_FILENAME, settings)
        self.policy = ResourcePolicy.from_settings(settings)

    async def retrieve(self, request: LocalSearchRequest) -> SearchResponse:
        """Index the resources (only what changed) and search them, in a worker thread."""
        try:
            hits = await asyncio.to_thread(self._index_and_search, request)
        except StoreUnavailable as exc:
            raise config_error(str(exc)) from exc
        return SearchResponse(query=request.query, results=[hit_result(hit) for hit in hits])

    def _index_and_search(self, request: LocalSearchRequest) -> list[Hit]:
        paths = [resolve_resource(resource, self.policy) for resource in request.resources]
        resources = collect_files(paths, self.policy)
        report = self.store.sync(resources.files, resources.folders)
        log.debug("Document index sync: %s", report)
        return self.store.search(request.query, report.document_ids, request.max_results)


def hit_result(hit: Hit) -> SearchResult:
    """A passage as a search result; its address names the file and the chunk within it, never the
    folder it lies in on the worker (the model cites it in the report: issue #49 §1)."""
    return SearchResult(
        title=hit.title, url=passage_address(Path(hit.path).name, hit.ordinal), content=hit.content, score=hit.score
    )


def resolve_resource(resource: str, policy: ResourcePolicy) -> Path:
    """The absolute, symlink-free path a resource (a path, a ``file://`` or ``local://`` URI) names on the worker.

    Refused unless ``policy`` allows it; refused before the existence check, which would
    otherwise tell a requester which files exist outside the roots.
    """
    if resource.strip().lower().startswith("rag://"):
        raise config_error(f"{resource!r} is a RAG resource; searching it needs RAG_PROVIDER=ragflow.")
    text = policy.path_text(resource)
    if not text:
        raise resource_not_found(resource)
    path = resolve(text)
    if path is None or not policy.allows(path):
        raise resource_outside_roots(resource, policy)
    try:
        exists = path.exists()
    except OSError:  # e.g. a folder on the way that the worker may not enter
        exists = False
    if not exists:  # a local:// URI is the API server's name for the path: where it lies is not said
        raise resource_not_found(resource, None if resource.strip().lower().startswith(LOCAL_SCHEME) else path)
    return path


def check_resources(resources: list[str], settings: Settings) -> None:
    """Refuse, before a run starts, the local resources its searches would refuse.

    Only for the local retriever: with RAGFlow, resources are ``rag://`` URIs, not paths.
    """
    if not uses_local_resources(settings):
        return
    policy = ResourcePolicy.from_settings(settings)
    for resource in resources:
        resolve_resource(resource, policy)


def collect_files(roots: list[Path], policy: ResourcePolicy) -> LocalResources:
    """Supported files named directly or found (recursively) under the folders among ``roots``."""
    files: dict[Path, None] = {}  # an ordered set
    folders: list[Path] = []
    for root in roots:
        if root.is_dir():
            folders.append(root)
        for path in _candidates(root, policy):
            if not utf8_named(path):
                log.warning("Skipping %r: its name is not UTF-8, which the index and a run's history hold", path)
            elif doc_extract.is_supported(path):
                files[path] = None
            else:
                log.debug("Skipping %s: %r files are not indexed", path, path.suffix or "extensionless")
            if len(files) > MAX_FILES:
                raise resource_too_large(root, f"{MAX_FILES} supported files")
    return LocalResources(files=list(files), folders=folders)


def _candidates(root: Path, policy: ResourcePolicy) -> Iterator[Path]:
    """The files a resource stands for: itself, or every file under it."""
    if root.is_dir():
        yield from walk_folder(root, policy)
    elif root.is_file():
        yield root
    else:
        log.debug("Skipping %s: neither a file nor a folder", root)


def walk_folder(folder: Path, policy: ResourcePolicy) -> Iterator[Path]:
    """The real path of every non-hidden file under ``folder`` that ``policy`` allows, in a stable
    order, without following symlinked folders; a symlinked file leading out of the roots is skipped."""
    seen = 0
    for directory, subdirs, names in os.walk(folder):
        subdirs[:] = sorted(
            name for name in subdirs
            if not name.startswith(".") and policy.may_hold_allowed_files(Path(directory, name))
        )
        seen += len(subdirs) + len(names)
        if seen > MAX_WALK_ENTRIES:
            raise resource_too_large(folder, f"{MAX_WALK_ENTRIES} entries")
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = resolve(str(Path(directory, name)))
            if path is not None and policy.allows(path):
                yield path
            else:
                log.warning("Skipping %s: its real path is outside the resource roots", Path(directory, name))


# ---------------------------------------------------------------- RAGFlow

RAGFLOW_RETRIEVAL_PATH = "/api/v1/retrieval"
RAGFLOW_MAX_PAGE_SIZE = 100
# RAGFlow's RetCode values (api/settings.py / common/constants.py), sent in the body of an HTTP 200.
_RAGFLOW_AUTH_CODES = {109: "authentication error", 401: "unauthorized"}
_RAGFLOW_PERMISSION_CODES = {108: "permission error", 403: "forbidden"}
_RAGFLOW_TRANSIENT_CODES = {100: "server exception", 105: "connection error", 500: "server error", 503: "unavailable"}
_RETRYABLE_STATUSES = {408, 425}


@register_retriever("ragflow")
class RAGFlowRetriever:
    """RAGFlow's ``POST /api/v1/retrieval``, as DeerFlow's RAGFlowProvider calls it."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    async def retrieve(self, request: LocalSearchRequest) -> SearchResponse:
        """One retrieval call over the datasets (and documents) the resources name."""
        base_url, api_key = self._credentials()
        dataset_ids, document_ids = parse_rag_resources(request.resources)
        payload: dict[str, Any] = {
            "question": request.query,
            "dataset_ids": dataset_ids,
            "page": 1,
            "page_size": min(max(request.max_results, 1), RAGFLOW_MAX_PAGE_SIZE),
        }
        if document_ids:
            payload["document_ids"] = document_ids
        response = await self._post(f"{base_url}{RAGFLOW_RETRIEVAL_PATH}", api_key, payload)
        data = ragflow_data(response)
        return ragflow_response(request.query, data, dataset_ids)

    def _credentials(self) -> tuple[str, str]:
        url, key = self._settings.ragflow_api_url, self._settings.ragflow_api_key
        if not url:
            raise config_error("RAG_PROVIDER=ragflow needs RAGFLOW_API_URL (e.g. http://localhost:9380).")
        if not key:
            raise config_error("RAG_PROVIDER=ragflow needs an API key: set RAGFLOW_API_KEY.")
        return url.rstrip("/"), key

    async def _post(self, url: str, api_key: str, payload: dict[str, Any]) -> httpx.Response:
        """The HTTP exchange, on the worker's kept client (``activities/support/pooled_http.py``:
        each step's retrieval reuses its connection); network failures become retryable errors."""
        timeout = self._settings.search_timeout_seconds
        headers = {"Authorization": f"Bearer {api_key}"}
        try:
            client = pooled_client(("ragflow",))
            return await client.post(url, json=payload, headers=headers, timeout=timeout)
        except httpx.TimeoutException:
            raise unavailable_error(f"RAGFlow did not answer within {timeout:g} s.") from None
        except httpx.TransportError as exc:
            raise unavailable_error(f"Could not reach RAGFlow at {url}: {type(exc).__name__}: {exc}") from exc


def parse_rag_resources(resources: list[str]) -> tuple[list[str], list[str]]:
    """(dataset ids, document ids) of ``rag://dataset/<dataset_id>[#<document_id>]`` URIs, deduplicated."""
    datasets: dict[str, None] = {}
    documents: dict[str, None] = {}
    for resource in resources:
        dataset_id, document_id = parse_rag_uri(resource)
        datasets[dataset_id] = None
        if document_id:
            documents[document_id] = None
    return list(datasets), list(documents)


def parse_rag_uri(uri: str) -> tuple[str, str | None]:
    """(dataset id, document id or None) of one DeerFlow RAG resource URI."""
    parsed = urlparse(uri.strip())
    parts = [part for part in parsed.path.split("/") if part]
    if parsed.scheme != "rag" or parsed.netloc != "dataset" or len(parts) != 1:
        raise config_error(
            f"{uri!r} is not a RAGFlow resource: with RAG_PROVIDER=ragflow, resources are "
            "rag://dataset/<dataset_id> URIs (optionally #<document_id>)."
        )
    return parts[0], parsed.fragment or None


def ragflow_data(response: httpx.Response) -> dict[str, Any]:
    """The ``data`` object of a successful answer; every failure mapped to an ApplicationError."""
    if response.status_code >= 400:
        raise ragflow_status_error(response)
    try:
        body = response.json()
    except ValueError:
        raise unavailable_error(f"RAGFlow sent an unreadable answer (HTTP {response.status_code}).") from None
    if not isinstance(body, dict):
        raise unavailable_error(f"RAGFlow answered with {type(body).__name__}, not a JSON object.")
    code, message = body.get("code"), str(body.get("message") or "").strip()
    if code != 0:
        raise ragflow_code_error(code, message)
    data = body.get("data")
    if not isinstance(data, dict):
        # RAGFlow answers a missing Authorization header with code 0, data false and a message.
        raise config_error(f"RAGFlow returned no results object: {message or 'no message'}. Check RAGFLOW_API_KEY.")
    return data


def ragflow_status_error(response: httpx.Response) -> ApplicationError:
    """Map an HTTP error status to an ApplicationError naming RAGFlow and the cause."""
    status, detail = response.status_code, _detail(response)
    suffix = f": {detail}" if detail else "."
    if status == 429:
        return rate_limited_error(f"RAGFlow rate limit reached (429){suffix}", response)
    if status >= 500 or status in _RETRYABLE_STATUSES:
        return unavailable_error(f"RAGFlow is unavailable ({status}){suffix}")
    if status in (401, 403):
        return config_error(f"RAGFlow rejected the API key ({status}){suffix} Check RAGFLOW_API_KEY.")
    if status == 404:
        return config_error(f"RAGFlow has no retrieval API at this address (404){suffix} Check RAGFLOW_API_URL.")
    return config_error(f"RAGFlow rejected the request ({status}){suffix}")


def ragflow_code_error(code: Any, message: str) -> ApplicationError:
    """Map RAGFlow's body ``code`` (its RetCode) to an ApplicationError."""
    suffix = f": {message}" if message else "."
    if code in _RAGFLOW_AUTH_CODES:
        return config_error(f"RAGFlow rejected the API key (code {code}){suffix} Check RAGFLOW_API_KEY.")
    if code in _RAGFLOW_PERMISSION_CODES:
        return config_error(f"RAGFlow refused access (code {code}, {_RAGFLOW_PERMISSION_CODES[code]}){suffix}")
    if code in _RAGFLOW_TRANSIENT_CODES:
        return unavailable_error(f"RAGFlow failed (code {code}, {_RAGFLOW_TRANSIENT_CODES[code]}){suffix}")
    return config_error(f"RAGFlow rejected the request (code {code}){suffix}")


def _detail(response: httpx.Response) -> str:
    """RAGFlow's ``message`` from an error body, else the start of the body text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return response.text.strip()[:300]


def ragflow_response(query: str, data: dict[str, Any], dataset_ids: list[str]) -> SearchResponse:
    """RAGFlow's chunks to our contract, in RAGFlow's order (best first); empty chunks dropped."""
    names = {
        str(agg.get("doc_id")): str(agg.get("doc_name"))
        for agg in data.get("doc_aggs") or []
        if isinstance(agg, dict) and agg.get("doc_id") and agg.get("doc_name")
    }
    fallback_dataset = dataset_ids[0] if len(dataset_ids) == 1 else ""
    results = [
        ragflow_result(chunk, names, fallback_dataset)
        for chunk in data.get("chunks") or []
        if isinstance(chunk, dict) and (chunk.get("content") or chunk.get("content_with_weight"))
    ]
    return SearchResponse(query=query, results=results)


def ragflow_result(chunk: dict[str, Any], names: dict[str, str], fallback_dataset: str) -> SearchResult:
    """One chunk; the URL is the DeerFlow resource URI of its document (``rag://dataset/<id>#<doc>``).

    Current RAGFlow names the fields ``document_id`` / ``document_keyword`` / ``dataset_id``;
    releases before the SDK rename sent ``doc_id`` / ``docnm_kwd`` / ``kb_id``.
    """
    document_id = str(chunk.get("document_id") or chunk.get("doc_id") or "")
    dataset_id = str(chunk.get("dataset_id") or chunk.get("kb_id") or fallback_dataset)
    title = chunk.get("document_keyword") or chunk.get("docnm_kwd") or names.get(document_id) or document_id
    similarity = chunk.get("similarity")
    return SearchResult(
        title=str(title or "RAGFlow document"),
        url=f"rag://dataset/{dataset_id}" + (f"#{document_id}" if document_id else ""),
        content=str(chunk.get("content") or chunk.get("content_with_weight")),
        score=float(similarity) if isinstance(similarity, int | float) else None,
    )


# ---------------------------------------------------------------- the activity


class RetrievalActivities:
    """``local_search_tool``, built with the worker's settings (retriever, resource roots, caps)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name="local_search_tool")
    @heartbeating
    @paced_retries
    async def local_search_tool(self, request: LocalSearchRequest) -> SearchResponse:
        """Search the run's resources with the configured retriever; at most ``max_results``, text capped."""
        retriever = get_retriever(self.settings)  # first, so a bad RAG_PROVIDER is reported on any query
        if request.max_results <= 0 or not request.query.strip() or not request.resources:
            return SearchResponse(query=request.query)
        response = await retriever.retrieve(request)
        return trim_response(response, request.max_results, self.settings.search_content_chars)
