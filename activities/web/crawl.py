"""The ``crawl_tool`` activity: fetch one web page or PDF, safely, and return it as markdown.

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
  counted on decoded bytes (:mod:`activities.web.body_decoder`), so a decompression bomb stops at
  the cap.
* **Content.** Only text-like types and PDF are read; images, archives and other binary types
  are refused by their declared type, and a body that claims to be text but has NUL bytes in
  its first KB is refused as binary.
* **Extraction** runs in a child process that is killed at its budget and has CPU and memory
  rlimits (:mod:`activities.support.isolated`), so no page can keep burning CPU after the activity
  gave up on it, nor hold a thread the rest of the worker needs. Decoding and an lxml pass
  (drops scripts and styles, finds the title, makes a plain-text fallback) are linear and get
  :data:`PREPARE_BUDGET_SECONDS`; trafilatura (markdown) and pypdf are not linear, so they get
  :data:`EXTRACT_BUDGET_SECONDS` (see :func:`extract_within_budget`). Malformed markup, or
  trafilatura over its budget, degrades to plain text.

Errors are ``ApplicationError`` with an agent-readable message and one of three types:
``CrawlRefused`` (non-retryable: unsafe or unsuitable URL or content), ``CrawlFailed``
(non-retryable: 4xx, unknown host, bad TLS certificate, unreadable document) and
``CrawlUnavailable`` (retryable: connection failures, timeouts, 5xx, 408 and 429).
"""

from __future__ import annotations

import asyncio
import codecs
import html
import io
import re
import ssl
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import charset_normalizer
import httpx
import lxml.html
from lxml import etree
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.guards import url_guard
from activities.support.heartbeat import heartbeating
from activities.support.isolated import Limits, run_isolated
from activities.support.limits import provider_slot
from activities.support.retry_pacing import paced_retries
from activities.support.tool_metrics import count_crawl_bytes
from activities.web.body_decoder import ACCEPT_ENCODING, BodyDecoder, EncodingRefused
from config.settings import Settings
from workflows.models import CrawlRequest, CrawlResult

MB = 1024 * 1024
MAX_REDIRECTS = 5
MAX_PAGE_BYTES = 5 * MB
MAX_PDF_BYTES = 10 * MB
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 10.0
# Whole fetch (DNS, redirects, body), then extraction; module level so tests can shorten
# them. Worst case for the activity: 30 s + the linear pass (decode, lxml: ~2 s for 5 MB,
# given 10 s) + 3 s for trafilatura or pypdf.
FETCH_DEADLINE_SECONDS = 30.0
PREPARE_BUDGET_SECONDS = 10.0
EXTRACT_BUDGET_SECONDS = 3.0
MAX_WALK_EVENTS = 200_000
EXTRACT_INPUT_CHARS = 1_000_000
SNIFF_BYTES = 1024
MAX_TITLE_CHARS = 200
META_SCAN_BYTES = 4096
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
# WHATWG treats these labels as their supersets; decoding with the strict codec garbles text.
CHARSET_SUPERSETS = {
    "iso-8859-1": "cp1252",
    "iso8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "us-ascii": "cp1252",
    "ascii": "cp1252",
    "gb2312": "gb18030",
    "gbk": "gb18030",
}
_META_CHARSET = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([a-z0-9_:.\-]+)", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"<\?xml[^>]*encoding\s*=\s*[\"']([a-z0-9_:.\-]+)", re.IGNORECASE)
# Patterns run on hostile input, so none can backtrack across the document: each attempt
# stops at the next "<" (or after a bounded length).
_TITLE = re.compile(r"<title[^<>]{0,200}>([^<]{1,1000})", re.IGNORECASE)
_TAG = re.compile(r"<[^<>]*>")
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
INVISIBLE_TAGS = ("script", "style", "noscript", "template", "svg", "iframe", "object", "embed")
# Elements that end a line in the plain-text fallback.
BLOCK_TAGS = ("p", "div", "br", "li", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "table", "pre")
BLOCK_TAGS += ("section", "article", "header", "footer", "blockquote", "dd", "dt")


@dataclass(frozen=True)
class FetchedPage:
    """A body that passed every guard, with what is needed to extract it."""

    url: str  # final URL, after redirects
    kind: Kind
    charset: str | None
    body: bytes | bytearray  # a bytearray from the fetch: no second copy of up to 10 MB


# ------------------------------------------------------------------------------------ errors


def refused(url: str | httpx.URL, reason: str) -> ApplicationError:
    """Unsafe or unsuitable: retrying cannot help, so non-retryable."""
    return ApplicationError(
        f"Refused to crawl {url_guard.display_url(url)}: {reason}", type="CrawlRefused", non_retryable=True
    )


def failed(url: str | httpx.URL, reason: str) -> ApplicationError:
    """The page is there but cannot be had (4xx, unreadable): non-retryable."""
    return ApplicationError(
        f"Could not crawl {url_guard.display_url(url)}: {reason}", type="CrawlFailed", non_retryable=True
    )


def unavailable(url: str | httpx.URL, reason: str) -> ApplicationError:
    """Probably transient (network, timeout, 5xx): Temporal may retry."""
    return ApplicationError(
        f"Could not crawl {url_guard.display_url(url)} right now: {reason}",
        type="CrawlUnavailable",
        non_retryable=False,
    )


# ------------------------------------------------------------------------------ the activity


class CrawlActivities:
    """``crawl_tool``, built with the worker's settings (allowed hosts, caps, extraction limits)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name="crawl_tool")
    @heartbeating
    @paced_retries
    async def crawl_tool(self, request: CrawlRequest) -> CrawlResult:
        """Fetch ``request.url`` behind the SSRF guards and return its main content as markdown.

        The markdown is capped to ``crawl_max_chars`` here, before it is returned, so an
        oversized page never enters workflow history. Heartbeats run in the background because
        the workflow schedules this activity with a heartbeat timeout shorter than the fetch
        deadline.
        """
        settings = self.settings
        async with provider_slot("crawl", settings.crawl_max_concurrency):
            page = await fetch(request.url, settings.crawl_allow_hosts)
        count_crawl_bytes(len(page.body))
        title, text = await extract_within_budget(page, settings.crawl_max_chars, settings)
        markdown, truncated = cut_at_break(text, settings.crawl_max_chars)
        return CrawlResult(url=page.url, title=title, markdown=markdown, truncated=truncated)


def cut_at_break(text: str, max_chars: int) -> tuple[str, bool]:
    """Cut ``text`` to ``max_chars`` (at a line or word break when one is near); say if cut.

    Unlike search's ``cap_text`` it adds no marker: the result's ``truncated`` flag says so."""
    text = text.strip()
    if len(text) <= max_chars:
        return text, False
    cut = text[:max_chars]
    for sep in ("\n", " "):
        at = cut.rfind(sep)
        if at >= max_chars * 0.8:
            cut = cut[:at]
            break
    return cut.rstrip(), True


# ------------------------------------------------------------------------------------- fetch


def build_transport() -> httpx.AsyncBaseTransport:
    """The transport every crawl uses. Module level so tests can wrap it and watch connects."""
    return httpx.AsyncHTTPTransport(retries=0, trust_env=False)


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


# ------------------------------------------------------------------------------ body guards


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

    The raw stream is decoded here (:mod:`activities.web.body_decoder`), not by httpx, so memory
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


# -------------------------------------------------------------------------------- extraction


async def extract_within_budget(page: FetchedPage, max_chars: int, settings: Settings) -> tuple[str | None, str]:
    """(title, text) of a fetched page, extracted in a child process on a time budget.

    For HTML the child first sends the result of the cheap, linear pass (title and plain
    text), then trafilatura's markdown; trafilatura's cost grows faster than linearly on some
    markup (a 1 MB table takes over 10 s), so if it is over :data:`EXTRACT_BUDGET_SECONDS` the
    child is killed and the plain text is the answer. A PDF has no cheap fallback, so running
    over fails the crawl. Either way the child is gone when this returns.
    """
    if page.kind == "pdf":
        budget = EXTRACT_BUDGET_SECONDS
        outcome = await run_isolated(_pdf_job, page.body, (max_chars,), [budget], Limits.for_budget(budget, settings))
        if outcome.timed_out_after is not None:
            raise failed(page.url, f"reading the PDF took longer than {budget:g} s")
        if outcome.error is not None:
            raise failed(page.url, f"the PDF could not be read ({outcome.error})")
        title, text = outcome.values[0]
        return title, text
    deadlines = [PREPARE_BUDGET_SECONDS] if page.kind == "text" else [PREPARE_BUDGET_SECONDS, EXTRACT_BUDGET_SECONDS]
    args = (page.charset, page.kind, page.url, max_chars)
    outcome = await run_isolated(_page_job, page.body, args, deadlines, Limits.for_budget(sum(deadlines), settings))
    if not outcome.values:
        if outcome.timed_out_after is not None:
            raise failed(page.url, f"reading the page took longer than {outcome.timed_out_after:g} s")
        raise failed(page.url, f"the page could not be read ({outcome.error})")
    title, plain_text = outcome.values[0]
    markdown = outcome.values[1] if len(outcome.values) > 1 else None
    return title, markdown or plain_text


def _page_job(body: bytes, charset: str | None, kind: Kind, url: str, max_chars: int) -> Iterator[Any]:
    """In the child: (title, plain text) from the linear pass, then trafilatura's markdown or None."""
    text = decode_body(body, charset)
    if kind == "text":
        yield None, text
        return
    prepared = prepare_html(text, max_chars)
    yield prepared.title, prepared.plain_text
    yield _trafilatura_markdown(prepared.markup, url)


def _pdf_job(body: bytes, max_chars: int) -> Iterator[tuple[str | None, str]]:
    """In the child: (title, text) of a PDF."""
    yield extract_pdf(body, max_chars)


def _codec(label: str | None) -> str | None:
    """A Python codec name for a charset label, or None if unknown."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    label = CHARSET_SUPERSETS.get(label, label)
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def _bom_codec(body: bytes) -> str | None:
    for bom, name in (
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if body.startswith(bom):
            return name
    return None


def _declared_in_document(body: bytes) -> str | None:
    head = body[:META_SCAN_BYTES]
    match = _META_CHARSET.search(head) or _XML_ENCODING.search(head)
    return match.group(1).decode("ascii") if match else None


def decode_body(body: bytes, header_charset: str | None) -> str:
    """Decode: BOM, then the Content-Type charset, then ``<meta charset>``, then a guess, then UTF-8."""
    for codec in (_bom_codec(body), _codec(header_charset), _codec(_declared_in_document(body))):
        if codec:
            return body.decode(codec, errors="replace")
    guess = charset_normalizer.from_bytes(body).best()
    if guess is not None and _codec(guess.encoding):
        return body.decode(guess.encoding, errors="replace")
    return body.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class PreparedHtml:
    """What the cheap pass over a page yields."""

    title: str | None
    markup: str  # without scripts, styles and comments; at most EXTRACT_INPUT_CHARS, for trafilatura
    plain_text: str  # the fallback answer


def prepare_html(document: str, max_chars: int) -> PreparedHtml:
    """Parse once with lxml (linear, tolerant of any markup) and drop invisible elements.

    Scripts and styles are most of the bytes of a modern page, so trafilatura gets far less to
    chew on; the plain text is computed up front so the fallback costs nothing later.
    """
    tree = parse_html(document)
    if tree is None:
        bounded = document[:EXTRACT_INPUT_CHARS]
        return PreparedHtml(_regex_title(bounded), bounded, _regex_text(bounded))
    markup = lxml.html.tostring(tree, encoding="unicode")[:EXTRACT_INPUT_CHARS]
    body = tree.find("body")
    # No body: lxml put everything elsewhere (e.g. an unclosed <title> swallowed the page).
    text = visible_text(body, 2 * max_chars) if body is not None else _regex_text(document[:EXTRACT_INPUT_CHARS])
    return PreparedHtml(html_title(tree), markup, text)


def parse_html(document: str) -> lxml.html.HtmlElement | None:
    """The document as an lxml tree without invisible elements, or None if lxml cannot parse it."""
    cleaned = _XML_DECLARATION.sub("", _CONTROL_CHARS.sub("", document), count=1)
    if not cleaned.strip():
        return None
    parser = lxml.html.HTMLParser(remove_comments=True, remove_pis=True)
    try:
        tree = lxml.html.document_fromstring(cleaned, parser=parser)
    except (etree.ParserError, ValueError):
        return None
    etree.strip_elements(tree, *INVISIBLE_TAGS, with_tail=False)
    return tree


def _trafilatura_markdown(markup: str, url: str) -> str | None:
    """Main content as markdown, or None when trafilatura finds none (or fails)."""
    import trafilatura  # here: only extraction children run this, so the worker never pays its import

    try:
        markdown = trafilatura.extract(
            markup,
            url=url,
            output_format="markdown",
            include_links=True,
            include_tables=True,
            include_images=False,
            include_comments=False,
            favor_recall=True,
        )
    except Exception:  # trafilatura on hostile markup; the caller falls back to plain text
        return None
    return markdown if markdown and markdown.strip() else None


def html_title(tree: lxml.html.HtmlElement) -> str | None:
    """``<title>``, else ``og:title``, looked for in ``<head>`` only so the cost is bounded."""
    head = tree.find("head")
    if head is None:
        return None
    title = head.findtext("title")
    if not title or not title.strip():
        og = head.xpath("meta[@property='og:title']/@content")
        title = str(og[0]) if og else None
    return _clean_title(title) if title else None


def _regex_title(document: str) -> str | None:
    match = _TITLE.search(document[: META_SCAN_BYTES * 16])
    return _clean_title(html.unescape(match.group(1))) if match else None


def _clean_title(title: str) -> str | None:
    """One line, capped: an unclosed ``<title>`` would otherwise swallow the whole page."""
    title = " ".join(_TAG.sub(" ", title).split())
    if len(title) > MAX_TITLE_CHARS:
        title = title[: MAX_TITLE_CHARS - 3].rstrip() + "..."
    return title or None


def visible_text(root: lxml.html.HtmlElement, limit: int) -> str:
    """The text under ``root``, a line per block element.

    Stops after about ``limit`` chars or :data:`MAX_WALK_EVENTS` nodes: a Python walk costs
    about 2 s per million elements, and 5 MB of ``<i></i>`` is 700,000 of them.
    """
    parts: list[str] = []
    size = 0
    walk = etree.iterwalk(root, events=("start", "end"))
    for (event, element), _ in zip(walk, range(MAX_WALK_EVENTS), strict=False):
        if event == "start":
            piece = element.text or ""
        else:
            tail = element.tail if element is not root else None
            piece = _block_end(element) + (tail or "")
        if piece:
            parts.append(piece)
            size += len(piece)
            if size > limit:
                break
    return _tidy_lines("".join(parts))


def _block_end(element: lxml.html.HtmlElement) -> str:
    if element.tag in ("td", "th"):
        return " "
    return "\n" if element.tag in BLOCK_TAGS else ""


def _regex_text(document: str) -> str:
    """Crude tag stripping for documents lxml could not structure."""
    return _tidy_lines(html.unescape(_TAG.sub(" ", document)))


def _tidy_lines(text: str) -> str:
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def extract_pdf(body: bytes, max_chars: int) -> tuple[str | None, str]:
    """Text of a PDF, page by page, stopping once there is more than ``max_chars`` of it.

    Raises whatever pypdf raises on a broken or hostile file; the caller reports it.
    """
    try:
        from pypdf import PdfReader  # local: the worker runs without it if PDFs are not needed
    except ImportError:
        raise RuntimeError("pypdf is not installed on the worker (pip install pypdf)") from None
    reader = PdfReader(io.BytesIO(body))
    if reader.is_encrypted:
        reader.decrypt("")
    parts: list[str] = []
    total = 0
    for page in reader.pages:
        text = page.extract_text() or ""
        parts.append(text)
        total += len(text)
        if total > max_chars:
            break
    title = reader.metadata.title if reader.metadata else None
    return (str(title) if title else None), "\n\n".join(p.strip() for p in parts if p.strip())
