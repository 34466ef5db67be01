"""arXiv (``SEARCH_API=arxiv``) through the ``arxiv`` client (arxiv.py), which reads the Atom API.

How the client is bent to fit an activity, and why:

* ``ARXIV_BASE_URL`` moves the endpoint through ``Client.query_url_format``, the client's own
  (documented) knob; tests point it at a loopback fake.
* ``num_retries=0``: Temporal retries, with backoff and the error sorting below; the client's
  own retries would sleep in the worker thread and hide the status.
* arxiv.py sends its requests without a timeout, so its ``requests`` session gets an adapter
  that applies ``SEARCH_TIMEOUT_SECONDS``, and a response hook that keeps the last response
  (its ``HTTPError`` carries the status but not ``Retry-After``).
* arXiv asks for at most one request every three seconds. One client per endpoint is kept for
  the worker's lifetime and used under a lock, so the client's own pacing
  (``delay_seconds``) spaces the worker's concurrent searches.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import arxiv
import requests
from requests.adapters import HTTPAdapter
from temporalio.exceptions import ApplicationError

from activities.web.search import register_provider, status_error, unavailable_error
from activities.web.search_providers._http import HttpProvider, check_base_url, plain_text
from config.settings import Settings
from workflows.contracts.tool_activities import SearchRequest, SearchResponse, SearchResult

DEFAULT_BASE_URL = "https://export.arxiv.org/api/query"
ARXIV_DELAY_SECONDS = 3.0  # arXiv's API terms: no more than one request every three seconds
QUERY_CHARS = 300  # arXiv rejects long queries; LangChain's wrapper cuts at the same length
MAX_AUTHORS = 5
PROVIDER = HttpProvider("arXiv", base_url_env="ARXIV_BASE_URL")


class _TimeoutAdapter(HTTPAdapter):
    """Gives every request of the session a timeout, since arxiv.py passes none."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.timeout = timeout

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        kwargs["timeout"] = self.timeout
        return super().send(request, **kwargs)


class _ArxivClient:
    """One arxiv.py client per endpoint plus what this module adds to it (see the docstring)."""

    def __init__(self, base_url: str) -> None:
        self.lock = threading.Lock()
        self.client = arxiv.Client(delay_seconds=ARXIV_DELAY_SECONDS, num_retries=0)
        self.client.query_url_format = base_url.replace("{", "{{").replace("}", "}}") + "?{}"
        self.adapter = _TimeoutAdapter(timeout=20.0)
        self.last_response: requests.Response | None = None
        session: requests.Session = self.client._session  # arxiv.py exposes no other way in
        session.mount("http://", self.adapter)
        session.mount("https://", self.adapter)
        session.hooks["response"].append(self._record)

    def _record(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        self.last_response = response

    def search(self, query: str, max_results: int, timeout: float) -> list[arxiv.Result]:
        """One request, paced by the client; failures are sorted here, under the lock, while
        ``last_response`` is still this request's."""
        with self.lock:
            self.adapter.timeout = timeout
            self.last_response = None
            self.client.page_size = max_results
            try:
                papers = list(self.client.results(arxiv.Search(query=query[:QUERY_CHARS], max_results=max_results)))
            except Exception as exc:
                error = arxiv_error(exc, self.last_response, timeout)
                if error is None:
                    raise
                raise error from exc
            content_type = self.last_response.headers.get("Content-Type", "") if self.last_response else ""
            if not papers and "xml" not in content_type.lower():
                raise unavailable_error(f"arXiv sent an unreadable answer (Content-Type {content_type or 'missing'}).")
            return papers


_clients: dict[str, _ArxivClient] = {}
_clients_lock = threading.Lock()


def _client_for(base_url: str) -> _ArxivClient:
    with _clients_lock:
        if base_url not in _clients:
            _clients[base_url] = _ArxivClient(base_url)
        return _clients[base_url]


@register_provider("arxiv")
class ArxivSearch:
    """One page of arXiv's relevance-ranked results per query."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    async def search(self, request: SearchRequest) -> SearchResponse:
        """arxiv.py is synchronous (requests underneath), so it runs in a worker thread."""
        client = _client_for(check_base_url(PROVIDER, self._settings.arxiv_base_url or DEFAULT_BASE_URL))
        timeout = self._settings.search_timeout_seconds
        papers = await asyncio.to_thread(client.search, request.query, max(request.max_results, 1), timeout)
        return arxiv_response(request.query, papers)


def arxiv_response(query: str, papers: list[arxiv.Result]) -> SearchResponse:
    """Papers to our contract: the abstract page as URL, authors and abstract as content."""
    results = []
    for paper in papers:
        if "/api/errors" in paper.entry_id:  # arXiv reports a bad query as an "Error" entry
            continue
        names = [author.name for author in paper.authors]
        authors = ", ".join(names[:MAX_AUTHORS]) + (" et al." if len(names) > MAX_AUTHORS else "")
        summary = " ".join(paper.summary.split())
        results.append(
            SearchResult(
                title=plain_text(paper.title) or paper.entry_id,
                url=paper.entry_id,
                content=f"Authors: {authors.removesuffix('.')}. {summary}" if authors else summary,
                published_date=paper.published.date().isoformat(),
            )
        )
    return SearchResponse(query=query, results=results)


def arxiv_error(exc: Exception, response: requests.Response | None, timeout: float) -> ApplicationError | None:
    """Sort an arxiv.py/requests failure into our three types; ``None`` for the unknown."""
    if isinstance(exc, arxiv.HTTPError):
        detail = plain_text(response.text)[:300] if response is not None else ""
        return status_error(
            PROVIDER.label,
            exc.status,
            detail,
            retry_after=response.headers.get("Retry-After") if response is not None else None,
            base_url_env=PROVIDER.base_url_env,
        )
    if isinstance(exc, requests.Timeout):
        return unavailable_error(f"arXiv did not answer within {timeout:g} s.")
    if isinstance(exc, requests.ConnectionError):
        return unavailable_error(f"Could not reach arXiv: {type(exc).__name__}: {exc}")
    if isinstance(exc, arxiv.UnexpectedEmptyPageError):
        return unavailable_error(f"arXiv sent an unexpectedly empty page: {exc}")
    return None
