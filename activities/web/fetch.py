"""Fetching one crawl URL: the SSRF guard on every hop, a pinned address, and a capped body.

The URL comes from a language model, so the fetch is treated as hostile in both directions:

* **SSRF.** Every URL, and every redirect target, goes through :mod:`activities.guards.url_guard`.
  Redirects are followed by hand (at most :data:`MAX_REDIRECTS`), so none is followed unchecked.
* **DNS rebinding.** The guard resolves the host once and hands back the address it validated.
  :func:`_send` then connects to *that address*: the request URL's host is replaced by the IP,
  the original host goes into the ``Host`` header, and for https the original host is passed as
  ``sni_hostname`` so httpcore uses it for SNI *and* certificate verification. Nothing resolves
  the name a second time, so a DNS answer that changes between check and connect cannot
  redirect the connection. ``trust_env=False`` keeps env proxies from taking the connection
  elsewhere, and keep-alive is off so a pooled connection opened for one host name (with its
  SNI) is never reused for another name that shares the address.
* **Resource exhaustion.** Connect timeout 5 s, read timeout 10 s, and one wall-clock deadline
  (:data:`FETCH_DEADLINE_SECONDS`) over resolution, redirects and body, so a server that drips
  one byte a second cannot hold the activity. Bodies are streamed and reading stops as soon as
  the cap is passed: pages over 5 MB and PDFs over 10 MB are *refused*, not truncated, because
  half an HTML document or PDF extracts badly and the agent is better told to look elsewhere.
  Only one layer of gzip or deflate is offered and accepted (anything else, e.g. zstd or
  ``gzip, gzip``, is refused by its header), and it is decoded here piece by piece with the cap
  counted on decoded bytes (:class:`activities.web.decode.BodyDecoder`), so a decompression bomb
  stops at the cap.
* **Content.** Only text-like types and PDF are read; images, archives and other binary types
  are refused by their declared type, and a body that claims to be text but has NUL bytes in
  its first KB is refused as binary.
"""

from __future__ import annotations

import asyncio
import codecs
import ssl
import zlib
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from temporalio.exceptions import ApplicationError

from activities.guards import url_guard
from activities.support.tls import verifying_context
from activities.web.crawl_errors import failed, refused, unavailable
from activities.web.decode import ACCEPT_ENCODING, BodyDecoder, EncodingRefused

MB = 1024 * 1024
MAX_REDIRECTS = 5
MAX_PAGE_BYTES = 5 * MB
MAX_PDF_BYTES = 10 * MB
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 10.0
# Whole fetch (DNS, redirects, body); module level so tests can shorten it. Worst case for the
# activity: 30 s + the extraction's budgets (activities.web.extract).
FETCH_DEADLINE_SECONDS = 30.0
SNIFF_BYTES = 1024
USER_AGENT = "Mozilla/5.0 (compatible; deerflow-temporal/0.1; +https://github.com/bytedance/deer-flow)"

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})
Kind = Literal["html", "xml", "text", "pdf", "unknown"]
TEXT_APPLICATION_TYPES: dict[str, Kind] = {
    "application/xhtml+xml": "html",
    "application/xml": "xml",
    "application/json": "text",
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
}


@dataclass(frozen=True)
class FetchedPage:
    """A body that passed every guard, with what is needed to extract it."""

    url: str  # final URL, after redirects
    kind: Kind
    charset: str | None
    body: bytes | bytearray  # a bytearray from the fetch: no second copy of up to 10 MB


def build_transport() -> httpx.AsyncBaseTransport:
    """The transport every crawl uses. Module level so tests can wrap it and watch connects."""
    return httpx.AsyncHTTPTransport(verify=verifying_context(trust_env=False), retries=0, trust_env=False)


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=build_transport(),
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(READ_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS),
        limits=httpx.Limits(max_keepalive_connections=0),
        headers={
            "User-Agent": USER_AGENT,
            "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,application/pdf,*/*;q=0.5",
            "Accept-Encoding": ACCEPT_ENCODING,
        },
    )


async def fetch(url: str, allow_hosts: list[str]) -> FetchedPage:
    """Fetch ``url`` following redirects by hand, all within :data:`FETCH_DEADLINE_SECONDS`."""
    deadline = FETCH_DEADLINE_SECONDS
    try:
        async with asyncio.timeout(deadline):
            async with _client() as client:
                return await _follow_redirects(client, url, allow_hosts)
    except TimeoutError:
        raise refused(url, f"downloading it took longer than {deadline:g} s, so it was abandoned") from None


async def _follow_redirects(client: httpx.AsyncClient, url: str, allow_hosts: list[str]) -> FetchedPage:
    seen: set[str] = set()
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        target = await _validate(current, allow_hosts)
        seen.add(str(target.url))
        next_url = await _fetch_one(client, target)
        if isinstance(next_url, FetchedPage):
            return next_url
        if str(next_url) in seen:
            raise refused(url, f"it redirects in a loop (back to {url_guard.display_url(next_url)})")
        current = str(next_url)
    raise refused(url, f"it redirects more than {MAX_REDIRECTS} times")


async def _validate(url: str, allow_hosts: list[str]) -> url_guard.ValidatedTarget:
    """The guard, with its verdicts turned into activity errors."""
    try:
        return await url_guard.validate_url(url, allow_hosts)
    except url_guard.UrlRefused as exc:
        raise ApplicationError(str(exc), type="CrawlRefused", non_retryable=True) from None
    except url_guard.HostNotFound as exc:
        raise (unavailable if exc.transient else failed)(url, str(exc)) from None


async def _fetch_one(client: httpx.AsyncClient, target: url_guard.ValidatedTarget) -> FetchedPage | httpx.URL:
    """One request to the validated address: the page, or the redirect target to check next."""
    try:
        response = await _send(client, target)
        try:
            return await _handle_response(response, target)
        finally:
            await response.aclose()
    except httpx.TimeoutException as exc:
        raise unavailable(target.url, f"the server timed out ({type(exc).__name__})") from None
    except httpx.TransportError as exc:
        if _is_certificate_error(exc):  # a retry would meet the same certificate
            raise failed(target.url, f"its TLS certificate was rejected ({exc})") from None
        raise unavailable(target.url, f"{type(exc).__name__}: {exc or 'connection failed'}") from None


def _is_certificate_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _send(client: httpx.AsyncClient, target: url_guard.ValidatedTarget) -> httpx.Response:
    """GET the page from the validated IP; see the module docstring for why the URL is rewritten."""
    extensions: dict[str, Any] = {}
    if target.url.scheme == "https":
        extensions["sni_hostname"] = target.host
    request = client.build_request(
        "GET", target.connect_url, headers={"Host": target.host_header}, extensions=extensions
    )
    return await client.send(request, stream=True)


async def _handle_response(response: httpx.Response, target: url_guard.ValidatedTarget) -> FetchedPage | httpx.URL:
    status = response.status_code
    if status in REDIRECT_STATUSES:
        location = response.headers.get("location")
        if not location:
            raise failed(target.url, f"HTTP {status} redirect without a Location header")
        try:
            return target.url.join(location).copy_with(fragment=None)
        except httpx.InvalidURL:
            raise refused(target.url, f"it redirects to an invalid URL {location[:200]!r}") from None
    _check_status(status, target.url)
    return await _read_page(response, target)


def _check_status(status: int, url: httpx.URL) -> None:
    if 200 <= status < 300:
        return
    if status >= 500 or status in RETRYABLE_CLIENT_STATUSES:
        raise unavailable(url, f"the server answered HTTP {status}")
    raise failed(url, f"the server answered HTTP {status}")


def content_kind(content_type: str, url: httpx.URL) -> Kind:
    """What to do with a declared content type; refuse binary ones by name."""
    media = content_type.split(";", 1)[0].strip().lower()
    if not media:
        return "unknown"
    if media == "text/html":
        return "html"
    if media == "text/xml" or (media.endswith("+xml") and media != "application/xhtml+xml"):
        return "xml"
    if media.startswith("text/") or media.endswith("+json"):
        return "text"
    if media in TEXT_APPLICATION_TYPES:
        return TEXT_APPLICATION_TYPES[media]
    raise refused(url, f"its content type is {media}, which is binary; only web pages, text and PDF are crawled")


async def _read_page(response: httpx.Response, target: url_guard.ValidatedTarget) -> FetchedPage:
    kind = content_kind(response.headers.get("content-type", ""), target.url)
    limit = MAX_PDF_BYTES if kind == "pdf" else MAX_PAGE_BYTES
    what = "PDF" if kind == "pdf" else "page"
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise refused(target.url, f"{what} larger than {limit // MB} MB ({int(declared):,} bytes declared)")
    body = await _read_capped(response, limit, target.url, what)
    kind = _sniff(body, kind, target.url)
    return FetchedPage(url=str(target.url), kind=kind, charset=response.charset_encoding, body=body)


async def _read_capped(response: httpx.Response, limit: int, url: httpx.URL, what: str) -> bytearray:
    """Read and decode the body, counting decoded bytes as they are produced; refuse past ``limit``.

    The raw stream is decoded here (:mod:`activities.web.decode`), not by httpx, so memory
    stays at ``limit`` plus one decoded piece and one network chunk whatever the compression
    ratio. Raw bytes are capped too: a stream of empty deflate blocks decodes to nothing.
    """
    try:
        decoder = BodyDecoder(response.headers.get("content-encoding", ""))
    except EncodingRefused as exc:
        raise refused(url, str(exc)) from None
    body = bytearray()
    raw = 0
    try:
        async for chunk in response.aiter_raw():
            raw += len(chunk)
            if raw > limit:
                raise refused(url, f"{what} larger than {limit // MB} MB; stopped reading")
            for piece in decoder.decode(chunk):
                if len(body) + len(piece) > limit:
                    raise refused(url, f"{what} larger than {limit // MB} MB once decompressed; stopped reading")
                body += piece
    except zlib.error as exc:
        raise failed(url, f"its compressed body is corrupt ({exc})") from None
    return body


def _sniff(body: bytes | bytearray, kind: Kind, url: httpx.URL) -> Kind:
    """Check the body against its declared kind: NUL bytes mean binary, whatever the header said."""
    if kind == "pdf":
        return kind
    if kind == "unknown" and body.startswith(b"%PDF-"):
        return "pdf"
    if b"\x00" in body[:SNIFF_BYTES] and not _has_utf16_bom(body):
        raise refused(url, "its body is binary (NUL bytes) although it was declared as text")
    return "html" if kind == "unknown" else kind


def _has_utf16_bom(body: bytes | bytearray) -> bool:
    return body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
