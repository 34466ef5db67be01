"""``crawl_tool`` against a hostile web site running on 127.0.0.1.

Network safety of the suite itself (it must never send a packet off loopback, even with a
guard of the crawler removed): the autouse ``sealed_network`` fixture

* replaces ``url_guard.resolve_host`` with a table, so names like ``internal.test`` "resolve"
  to private addresses without a DNS query;
* wraps the crawler's httpx transport so a request to anything but a loopback IP literal fails
  the test *before* it reaches the real transport (this also catches a broken pinning);
* patches ``socket.getaddrinfo`` and ``socket.socket.connect`` to fail on anything but
  loopback, as a last line.

Only 127.0.0.1 is allow-listed (the ``Settings`` the crawl activity is built with). A
second server on 127.0.0.2 plays the internal service a redirect tries to reach.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import socket
import ssl
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.guards import url_guard
from activities.support import isolated
from activities.web import crawl, decode, extract, fetch, page_text
from config.settings import Settings
from offline.loopback_http import FakeServerHandler
from tests.support.documents import ARTICLE_HTML, ARTICLE_SENTENCE, make_pdf, make_slow_pdf
from workflows.contracts.tool_activities import CrawlRequest, CrawlResult

MB = 1024 * 1024
MALFORMED_HTML = (
    b"<html><head><title>Broken<body><div><p>Unclosed paragraph about MALFORMEDTEXT coral"
    b"<table><tr><td>cell text<div></span></span>&bogus; <<<>>> <p <b>bold &#xZZZ; "
    b"<script>var x = '<p>'</p>more MALFORMEDTAIL words</tab"
)
PNG_BYTES = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"


SLOW_PDF = make_slow_pdf(pages=8, operators=150_000)
BIG_TABLE_HTML = (
    "<html><head><title>Rows</title></head><body><p>TABLEINTRO of the rows below.</p><table>"
    + "<tr><td>cell a</td><td>cell b</td><td>cell c</td></tr>" * 8000
    + "</table></body></html>"
)


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, from /proc (children of children included)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended while we looked
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def extraction_children() -> list[int]:
    """Live extraction children: the fork server's children (the fork server itself idles)."""
    return [pid for server in _descendants(os.getpid()) for pid in _descendants(server)]


def cpu_seconds_of_tree() -> float:
    """CPU time of this process (every thread) and of every live descendant."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = time.process_time()
    for pid in _descendants(os.getpid()):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


# ------------------------------------------------------------------------- the hostile site


@dataclass
class SiteLog:
    """What the servers saw, written from their threads."""

    hits: list[str] = field(default_factory=list)
    host_headers: dict[str, str] = field(default_factory=dict)
    stream_sent: int = 0
    stream_aborted: threading.Event = field(default_factory=threading.Event)
    drip_aborted: threading.Event = field(default_factory=threading.Event)


class HostileHandler(FakeServerHandler):
    """Routes of the test site. HTTP/1.0, so a body without Content-Length ends at close."""

    server: SiteServer

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        log = self.server.log
        log.hits.append(self.path)
        log.host_headers[self.path] = self.headers.get("Host", "")
        route = ROUTES.get(self.path.split("?", 1)[0])
        if route is None and self.path.startswith("/chain/"):
            route = chain
        if route is None:
            self.reply(404, "text/html", b"<p>not here</p>")
            return
        route(self)

    def reply(self, status: int, content_type: str | None, body: bytes, **headers: str) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def redirect(self, location: str) -> None:
        self.reply(302, "text/html", b"", Location=location)


class SiteServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, host: str, log: SiteLog) -> None:
        super().__init__((host, 0), HostileHandler)
        self.log = log
        self.peer_port = 0  # the other server's port, for cross-server redirects

    @property
    def port(self) -> int:
        return int(self.server_address[1])


def huge_declared(h: HostileHandler) -> None:
    """Declares 50 MB: refused from the header alone; the body is never sent."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Length", str(50 * MB))
    h.end_headers()
    _stream_until_closed(h, 50 * MB)


def huge_stream(h: HostileHandler) -> None:
    """50 MB without Content-Length: only a streaming cap stops the crawler reading it all."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.end_headers()
    _stream_until_closed(h, 50 * MB)


def _stream_until_closed(h: HostileHandler, total: int) -> None:
    chunk = b"<p>" + b"filler text " * 5450 + b"</p>\n"  # ~64 KB
    sent = 0
    try:
        while sent < total:
            h.wfile.write(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        h.server.log.stream_aborted.set()
    finally:
        h.server.log.stream_sent = sent


def slow_drip(h: HostileHandler) -> None:
    """One byte a second, forever as far as the client can tell."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Length", "1000")
    h.end_headers()
    try:
        for _ in range(60):
            h.wfile.write(b"x")
            time.sleep(1)
    except (BrokenPipeError, ConnectionResetError):
        h.server.log.drip_aborted.set()


ZERO_MB = bytes(MB)


def _gzip_of_zeros(layers: int) -> Iterator[bytes]:
    """gzip (``layers`` deep) of 1 GiB of zeros, made on the fly: never more than 1 MB in hand."""
    compressors = [zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16) for _ in range(layers)]

    def squeeze(data: bytes, final: bool) -> bytes:
        for compressor in compressors:
            data = compressor.compress(data) + (compressor.flush() if final else b"")
        return data

    for _ in range(1024):
        yield squeeze(ZERO_MB, final=False)
    yield squeeze(b"", final=True)


def bomb(encoding: str, layers: int) -> Callable[[HostileHandler], None]:
    """Streams a gzip bomb, without Content-Length, until the client hangs up."""

    def route(h: HostileHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Encoding", encoding)
        h.end_headers()
        h.server.log.stream_sent = 0
        try:
            for chunk in _gzip_of_zeros(layers):
                h.wfile.write(chunk)
                h.server.log.stream_sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            h.server.log.stream_aborted.set()

    return route


def compressed(encoding: str, body: bytes, wbits: int) -> Callable[[HostileHandler], None]:
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    data = compressor.compress(body) + compressor.flush()
    return lambda h: h.reply(200, "text/html; charset=utf-8", data, Content_Encoding=encoding)


def chain(h: HostileHandler) -> None:
    """/chain/N redirects N more times, then serves the article."""
    remaining = int(h.path.rsplit("/", 1)[1])
    if remaining == 0:
        h.reply(200, "text/html; charset=utf-8", ARTICLE_HTML.encode())
    else:
        h.redirect(f"/chain/{remaining - 1}")


def secret(h: HostileHandler) -> None:
    h.reply(200, "text/plain", b"SECRET-INTERNAL-DATA")


ROUTES: dict[str, Callable[[HostileHandler], None]] = {
    "/article": lambda h: h.reply(200, "text/html; charset=utf-8", ARTICLE_HTML.encode()),
    "/no-type": lambda h: h.reply(200, None, ARTICLE_HTML.encode()),
    "/plain": lambda h: h.reply(200, "text/plain; charset=koi8-r", "Привет, мир".encode("koi8-r")),
    "/json": lambda h: h.reply(200, "application/json", b'{"answer": 42}'),
    "/latin1": lambda h: h.reply(
        200,
        "text/html",
        '<html><head><meta charset="iso-8859-1"><title>Café</title></head>'
        "<body><p>Crème brûlée à la française, façade, naïve, œuvre.</p></body></html>".encode("cp1252"),
    ),
    "/gbk": lambda h: h.reply(
        200,
        "text/html",
        '<html><head><meta http-equiv="Content-Type" content="text/html; charset=gbk">'
        "<title>深海热泉</title></head><body><p>深海热泉孕育了不需要阳光的生态系统。</p></body></html>".encode("gbk"),
    ),
    "/doc.pdf": lambda h: h.reply(200, "application/pdf", make_pdf("Vent fauna survey PDFMARKER", "Vent Report")),
    "/bad.pdf": lambda h: h.reply(200, "application/pdf", b"%PDF-1.4\nthis is not really a pdf"),
    "/slow.pdf": lambda h: h.reply(200, "application/pdf", SLOW_PDF),
    "/big-table": lambda h: h.reply(200, "text/html; charset=utf-8", BIG_TABLE_HTML.encode()),
    "/malformed": lambda h: h.reply(200, "text/html", MALFORMED_HTML),
    "/long": lambda h: h.reply(200, "text/plain", ("word " * 10_000).encode()),
    "/png": lambda h: h.reply(200, "image/png", PNG_BYTES),
    "/octet": lambda h: h.reply(200, "application/octet-stream", b"\x00\x01\x02binary"),
    "/zip": lambda h: h.reply(200, "application/zip", b"PK\x03\x04\x00\x00"),
    "/fake-html": lambda h: h.reply(200, "text/html", PNG_BYTES + b"<html>hidden</html>"),
    "/huge": huge_declared,
    "/huge-stream": huge_stream,
    "/slow": slow_drip,
    "/bomb-gzip": bomb("gzip", 1),
    "/bomb-stacked": bomb("gzip, gzip", 2),
    "/zstd": lambda h: h.reply(200, "text/html", b"\x28\xb5\x2f\xfd" + bytes(32 * 1024), Content_Encoding="zstd"),
    "/br": lambda h: h.reply(200, "text/html", bytes(32 * 1024), Content_Encoding="br"),
    "/gzip-article": compressed("gzip", ARTICLE_HTML.encode(), zlib.MAX_WBITS | 16),
    "/deflate-article": compressed("deflate", ARTICLE_HTML.encode(), zlib.MAX_WBITS),
    "/raw-deflate-article": compressed("deflate", ARTICLE_HTML.encode(), -zlib.MAX_WBITS),
    "/corrupt-gzip": lambda h: h.reply(200, "text/html", b"\x1f\x8b\x08\x00garbage" * 10, Content_Encoding="gzip"),
    "/to-article": lambda h: h.redirect("/article#section"),
    "/to-loopback2": lambda h: h.redirect(f"http://127.0.0.2:{h.server.peer_port}/secret"),
    "/to-metadata": lambda h: h.redirect("http://169.254.169.254/latest/meta-data"),
    "/to-internal": lambda h: h.redirect(f"http://internal.test:{h.server.port}/article"),
    "/to-ftp": lambda h: h.redirect("ftp://127.0.0.1/file"),
    "/loop": lambda h: h.redirect("/loop"),
    "/loop-a": lambda h: h.redirect("/loop-b"),
    "/loop-b": lambda h: h.redirect("/loop-a"),
    "/no-location": lambda h: h.reply(302, "text/html", b""),
    "/status/404": lambda h: h.reply(404, "text/html", b"gone"),
    "/status/429": lambda h: h.reply(429, "text/html", b"slow down"),
    "/status/503": lambda h: h.reply(503, "text/html", b"down"),
    "/secret": secret,
}


@dataclass
class Site:
    public: SiteServer  # 127.0.0.1, allow-listed
    internal: SiteServer  # 127.0.0.2, not allow-listed
    log: SiteLog
    internal_log: SiteLog

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.public.port}{path}"


@pytest.fixture(scope="module", autouse=True)
def fork_server() -> None:
    """Started up front, so the first extraction's timing is not its start-up's."""
    isolated.start_fork_server(LOOPBACK_ONLY)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    log, internal_log = SiteLog(), SiteLog()
    public, internal = SiteServer("127.0.0.1", log), SiteServer("127.0.0.2", internal_log)
    public.peer_port, internal.peer_port = internal.port, public.port
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (public, internal)]
    for thread in threads:
        thread.start()
    yield Site(public, internal, log, internal_log)
    for server in (public, internal):
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------------- sealed network


def _is_loopback_literal(host: object) -> bool:
    try:
        return ipaddress.ip_address(str(host)).is_loopback
    except ValueError:
        return False


class LoopbackOnlyTransport(httpx.AsyncBaseTransport):
    """Records every request the crawler makes; refuses (fails the test) any not to a loopback IP."""

    def __init__(self, inner: httpx.AsyncBaseTransport, log: list[str]) -> None:
        self.inner = inner
        self.log = log

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.log.append(f"{request.url.host}:{request.url.port}{request.url.path}")
        if not _is_loopback_literal(request.url.host):
            raise AssertionError(f"crawler tried to connect to {request.url.host!r}")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


FAKE_DNS = {"internal.test": ["10.0.0.5"], "metadata.test": ["169.254.169.254"]}


@dataclass
class Network:
    requests: list[str]  # host:port/path of every request that reached the transport
    connects: list[str]  # every socket connect
    lookups: list[str]  # every name given to the (fake) resolver


@pytest.fixture(autouse=True)
def sealed_network(monkeypatch: pytest.MonkeyPatch) -> Network:
    network = Network([], [], [])
    real_transport = fetch.build_transport
    monkeypatch.setattr(fetch, "build_transport", lambda: LoopbackOnlyTransport(real_transport(), network.requests))

    async def fake_resolve(host: str, port: int) -> list[str]:
        network.lookups.append(host)
        if host not in FAKE_DNS:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return FAKE_DNS[host]

    monkeypatch.setattr(url_guard, "resolve_host", fake_resolve)

    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _is_loopback_literal(host):
            raise AssertionError(f"real DNS lookup of {host!r} attempted")
        return real_getaddrinfo(host, *args, **kwargs)

    def guarded_connect(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            network.connects.append(str(address[0]))
            if not _is_loopback_literal(address[0]):
                raise AssertionError(f"socket connect to {address[0]!r} attempted")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    return network


# The crawler's settings in these tests: 127.0.0.1 allow-listed, nothing else.
LOOPBACK_ONLY = Settings(DEERFLOW_CRAWL_ALLOW_HOSTS="127.0.0.1", DEERFLOW_CRAWL_MAX_CHARS=20_000)


async def run(url: str, settings: Settings = LOOPBACK_ONLY) -> CrawlResult:
    crawl_tool = crawl.CrawlActivities(settings).crawl_tool
    result: CrawlResult = await ActivityEnvironment().run(crawl_tool, CrawlRequest(url=url))
    return result


async def crawl_error(
    url: str, error_type: str = "CrawlRefused", settings: Settings = LOOPBACK_ONLY
) -> ApplicationError:
    with pytest.raises(ApplicationError) as caught:
        await run(url, settings)
    assert caught.value.type == error_type, caught.value.message
    assert caught.value.non_retryable is (error_type != "CrawlUnavailable")
    return caught.value


# ------------------------------------------------------------------------------- content


async def test_article_is_main_content_markdown(site: Site) -> None:
    result = await run(site.url("/article"))
    assert ARTICLE_SENTENCE in result.markdown
    assert "[survey of vent fields](https://example.org/vents)" in result.markdown
    assert "NAVBOILERPLATE" not in result.markdown
    assert "FOOTERBOILERPLATE" not in result.markdown
    assert result.title == "Life at the Vents"
    assert result.url == site.url("/article")
    assert result.truncated is False


async def test_pdf_text_is_extracted(site: Site) -> None:
    result = await run(site.url("/doc.pdf"))
    assert "Vent fauna survey PDFMARKER" in result.markdown
    assert result.title == "Vent Report"


async def test_broken_pdf_is_a_clear_failure(site: Site) -> None:
    error = await crawl_error(site.url("/bad.pdf"), "CrawlFailed")
    assert "the PDF could not be read" in error.message


@pytest.mark.parametrize(
    ("path", "expected", "title"),
    [
        ("/latin1", "Crème brûlée à la française, façade, naïve, œuvre.", "Café"),
        ("/gbk", "深海热泉孕育了不需要阳光的生态系统。", "深海热泉"),
        ("/plain", "Привет, мир", None),
    ],
)
async def test_charsets(site: Site, path: str, expected: str, title: str | None) -> None:
    result = await run(site.url(path))
    assert expected in result.markdown
    assert result.title == title


async def test_json_and_missing_content_type(site: Site) -> None:
    assert '{"answer": 42}' in (await run(site.url("/json"))).markdown
    assert ARTICLE_SENTENCE in (await run(site.url("/no-type"))).markdown


async def test_malformed_html_still_gives_text(site: Site) -> None:
    result = await run(site.url("/malformed"))
    assert "MALFORMEDTEXT" in result.markdown
    assert "cell text" in result.markdown
    assert result.title is not None and len(result.title) <= 200  # unclosed <title> is capped


async def test_slow_extraction_falls_back_to_plain_text(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """trafilatura over its time budget (a 430 KB table takes it ~4 s quiet): plain text, without waiting.

    The plain-text cells show that the budget, not trafilatura, ended the extraction; the time bound
    only catches a wait for trafilatura on a quiet machine, and is loose because a loaded one took
    4.3 s for the fallback alone."""
    monkeypatch.setattr(extract, "EXTRACT_BUDGET_SECONDS", 0.5)
    started = time.monotonic()
    result = await run(site.url("/big-table"))
    assert time.monotonic() - started < 30
    assert "TABLEINTRO" in result.markdown
    assert "cell a cell b" in result.markdown  # the plain-text fallback's cells, not a markdown table
    assert result.title == "Rows"


async def test_slow_pdf_is_stopped_at_its_budget_and_leaves_nothing_running(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 pages sharing one 150k-operator stream (~75 s of pypdf): stopped at 1 s, CPU use stops."""
    monkeypatch.setattr(extract, "EXTRACT_BUDGET_SECONDS", 1.0)
    started = time.monotonic()
    error = await crawl_error(site.url("/slow.pdf"), "CrawlFailed")
    assert time.monotonic() - started < 3
    assert error.message == f"Could not crawl {site.url('/slow.pdf')}: reading the PDF took longer than 1 s"
    await asyncio.sleep(0.2)
    assert extraction_children() == []
    before = cpu_seconds_of_tree()
    await asyncio.sleep(1.0)
    assert cpu_seconds_of_tree() - before < 0.3, "something kept computing after the crawl gave up"


async def test_a_cancelled_crawl_kills_its_extraction_at_once(site: Site) -> None:
    """The activity was cancelled: its child must not run on to the 3 s budget."""
    crawling = asyncio.create_task(run(site.url("/slow.pdf?cancel")))
    while not extraction_children():
        await asyncio.sleep(0.05)
    crawling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await crawling
    await asyncio.sleep(0.3)
    assert extraction_children() == []


async def test_heavy_pdfs_do_not_starve_a_small_page(site: Site) -> None:
    """Six slow PDFs at once (the old thread design then took 18.9 s for a small page): < 3 s."""
    served = len(site.log.hits)
    pdfs = [asyncio.create_task(crawl_error(site.url(f"/slow.pdf?{n}"), "CrawlFailed")) for n in range(6)]
    while sum(hit.startswith("/slow.pdf?") for hit in site.log.hits[served:]) < 6:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # all six fetched and extracting
    started = time.monotonic()
    result = await run(site.url("/article"))
    elapsed = time.monotonic() - started
    errors = await asyncio.gather(*pdfs)
    assert ARTICLE_SENTENCE in result.markdown
    assert elapsed < 3, f"small page took {elapsed:.1f} s"
    assert all("reading the PDF took longer than 3 s" in error.message for error in errors)


async def test_markdown_is_capped_before_it_is_returned(site: Site) -> None:
    capped = Settings(DEERFLOW_CRAWL_ALLOW_HOSTS="127.0.0.1", DEERFLOW_CRAWL_MAX_CHARS=1000)
    result = await run(site.url("/long"), capped)
    assert result.truncated is True
    assert 800 <= len(result.markdown) <= 1000


async def test_same_site_redirect_is_followed(site: Site) -> None:
    result = await run(site.url("/to-article"))
    assert result.url == site.url("/article")
    assert ARTICLE_SENTENCE in result.markdown


async def test_five_redirects_are_followed(site: Site) -> None:
    result = await run(site.url("/chain/5"))
    assert result.url == site.url("/chain/0")


# --------------------------------------------------------------------------- SSRF guards


async def test_redirect_to_unlisted_loopback_address_is_refused(site: Site, sealed_network: Network) -> None:
    error = await crawl_error(site.url("/to-loopback2"))
    assert error.message == (
        f"Refused to crawl http://127.0.0.2:{site.internal.port}/secret: it resolves to 127.0.0.2, a loopback address"
    )
    assert site.internal_log.hits == []
    assert all(r.startswith("127.0.0.1:") for r in sealed_network.requests)


async def test_redirect_to_metadata_service_is_refused_before_connecting(site: Site, sealed_network: Network) -> None:
    error = await crawl_error(site.url("/to-metadata"))
    assert error.message == (
        "Refused to crawl http://169.254.169.254/latest/meta-data: it resolves to 169.254.169.254, a link-local address"
    )
    assert sealed_network.requests == [f"127.0.0.1:{site.public.port}/to-metadata"]
    assert set(sealed_network.connects) == {"127.0.0.1"}


async def test_metadata_service_is_refused_directly(sealed_network: Network) -> None:
    error = await crawl_error("http://169.254.169.254/latest/meta-data/iam/security-credentials/")
    assert "it resolves to 169.254.169.254, a link-local address" in error.message
    assert sealed_network.requests == [] and sealed_network.connects == []


async def test_name_resolving_to_private_address_is_refused(site: Site, sealed_network: Network) -> None:
    error = await crawl_error(f"http://internal.test:{site.public.port}/article")
    assert error.message == (
        f"Refused to crawl http://internal.test:{site.public.port}/article: it resolves to 10.0.0.5, a private address"
    )
    assert sealed_network.lookups == ["internal.test"]
    assert sealed_network.requests == [] and sealed_network.connects == []


async def test_redirect_to_name_resolving_to_private_address_is_refused(site: Site, sealed_network: Network) -> None:
    error = await crawl_error(site.url("/to-internal"))
    assert "it resolves to 10.0.0.5, a private address" in error.message
    assert sealed_network.requests == [f"127.0.0.1:{site.public.port}/to-internal"]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://2130706433/", "it resolves to 127.0.0.1, a loopback address"),
        ("http://0x7f.1/", "it resolves to 127.0.0.1, a loopback address"),
        ("http://[::ffff:169.254.169.254]/", "it resolves to ::ffff:a9fe:a9fe, a link-local address"),
        ("http://metadata.test/", "it resolves to 169.254.169.254, a link-local address"),
        ("ftp://127.0.0.1/file", "only http and https URLs can be crawled"),
        ("http://127.0.0.1@169.254.169.254/", "URLs with a user name or password in them are not crawled"),
    ],
)
async def test_unsafe_urls_are_refused_without_traffic(
    url: str, reason: str, sealed_network: Network
) -> None:
    error = await crawl_error(url, settings=Settings())  # even loopback is off limits here
    assert reason in error.message
    assert sealed_network.requests == [] and sealed_network.connects == []


async def test_redirect_to_other_scheme_is_refused(site: Site) -> None:
    error = await crawl_error(site.url("/to-ftp"))
    assert error.message == (
        "Refused to crawl ftp://127.0.0.1/file: only http and https URLs can be crawled, not scheme 'ftp'"
    )


async def test_connection_goes_to_the_validated_address(
    site: Site, sealed_network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the second answer (10.0.0.5) must never be asked for, let alone used."""
    answers = iter([["127.0.0.1"], ["10.0.0.5"]])

    async def rebinding_resolve(host: str, port: int) -> list[str]:
        sealed_network.lookups.append(host)
        return next(answers)

    monkeypatch.setattr(url_guard, "resolve_host", rebinding_resolve)
    result = await run(f"http://rebind.test:{site.public.port}/article?rebind")
    assert ARTICLE_SENTENCE in result.markdown
    assert result.url == f"http://rebind.test:{site.public.port}/article?rebind"
    assert sealed_network.lookups == ["rebind.test"]  # resolved once, by the guard
    assert sealed_network.requests == [f"127.0.0.1:{site.public.port}/article"]
    assert site.log.host_headers["/article?rebind"] == f"rebind.test:{site.public.port}"


# --------------------------------------------------------------------------- redirects


@pytest.mark.parametrize("path", ["/loop", "/loop-a"])
async def test_redirect_loop_is_a_clear_error(site: Site, path: str) -> None:
    error = await crawl_error(site.url(path))
    assert error.message.startswith(f"Refused to crawl {site.url(path)}: it redirects in a loop (back to ")


async def test_too_many_redirects(site: Site) -> None:
    error = await crawl_error(site.url("/chain/6"))
    assert error.message == f"Refused to crawl {site.url('/chain/6')}: it redirects more than 5 times"


async def test_redirect_without_location(site: Site) -> None:
    error = await crawl_error(site.url("/no-location"), "CrawlFailed")
    assert "redirect without a Location header" in error.message


# ---------------------------------------------------------------------- body guards


async def test_declared_huge_body_is_refused_without_download(site: Site) -> None:
    started = time.monotonic()
    error = await crawl_error(site.url("/huge"))
    assert time.monotonic() - started < 5
    assert error.message == f"Refused to crawl {site.url('/huge')}: page larger than 5 MB (52,428,800 bytes declared)"


async def test_streamed_huge_body_is_cut_off_at_the_cap(site: Site) -> None:
    site.log.stream_aborted.clear()
    started = time.monotonic()
    error = await crawl_error(site.url("/huge-stream"))
    assert time.monotonic() - started < 5
    assert error.message == f"Refused to crawl {site.url('/huge-stream')}: page larger than 5 MB; stopped reading"
    assert site.log.stream_aborted.wait(5), "the server never saw the connection closed"
    assert site.log.stream_sent < 20 * MB


async def test_slow_drip_is_abandoned_at_the_deadline(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch, "FETCH_DEADLINE_SECONDS", 2.0)
    environment = ActivityEnvironment()
    beats: list[Any] = []
    environment.on_heartbeat = lambda *details: beats.append(details)
    started = time.monotonic()
    with pytest.raises(ApplicationError) as caught:
        await environment.run(crawl.CrawlActivities(LOOPBACK_ONLY).crawl_tool, CrawlRequest(url=site.url("/slow")))
    error = caught.value
    elapsed = time.monotonic() - started
    assert 1.5 < elapsed < 4
    assert error.type == "CrawlRefused" and error.non_retryable
    assert len(beats) >= 1  # the workflow's heartbeat timeout (15 s) is shorter than the deadline
    assert error.message == (
        f"Refused to crawl {site.url('/slow')}: downloading it took longer than 2 s, so it was abandoned"
    )


@pytest.mark.parametrize(
    ("path", "media"),
    [("/png", "image/png"), ("/octet", "application/octet-stream"), ("/zip", "application/zip")],
)
async def test_binary_content_types_are_refused(site: Site, path: str, media: str) -> None:
    error = await crawl_error(site.url(path))
    assert error.message == (
        f"Refused to crawl {site.url(path)}: its content type is {media}, which is binary; "
        "only web pages, text and PDF are crawled"
    )


async def test_binary_body_declared_as_html_is_refused(site: Site) -> None:
    error = await crawl_error(site.url("/fake-html"))
    assert "its body is binary (NUL bytes) although it was declared as text" in error.message


# ---------------------------------------------------------------------- compressed bodies


@pytest.mark.parametrize("path", ["/gzip-article", "/deflate-article", "/raw-deflate-article"])
async def test_offered_encodings_are_decoded(site: Site, path: str) -> None:
    assert ARTICLE_SENTENCE in (await run(site.url(path))).markdown


async def test_only_offered_encodings_are_asked_for() -> None:
    async with fetch._client() as client:
        assert client.headers["accept-encoding"] == "gzip, deflate"


async def test_gzip_bomb_stops_at_the_cap_with_bounded_memory(site: Site) -> None:
    """1 GiB of zeros as ~1 MB of gzip: refused at 5 MB decoded, memory cap + a small constant."""
    site.log.stream_aborted.clear()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        error = await crawl_error(site.url("/bomb-gzip"))
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
    reason = "page larger than 5 MB once decompressed; stopped reading"
    assert error.message == f"Refused to crawl {site.url('/bomb-gzip')}: {reason}"
    assert peak < fetch.MAX_PAGE_BYTES + 2 * MB, f"peak {peak:,} bytes"
    assert site.log.stream_aborted.wait(5), "the server never saw the connection closed"
    assert site.log.stream_sent < 1 * MB  # ~5 KB of gzip is 5 MB of zeros; the rest was never read


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/bomb-stacked", "it is sent with stacked Content-Encodings (gzip, gzip); the crawler accepts one layer"),
        ("/zstd", "it is sent with Content-Encoding zstd, which the crawler did not offer (it accepts gzip, deflate)"),
        ("/br", "it is sent with Content-Encoding br, which the crawler did not offer (it accepts gzip, deflate)"),
    ],
)
async def test_unoffered_or_stacked_encodings_are_refused_unread(site: Site, path: str, reason: str) -> None:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        baseline = tracemalloc.get_traced_memory()[0]
        error = await crawl_error(site.url(path))
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
    assert error.message == f"Refused to crawl {site.url(path)}: {reason}"
    assert peak < 2 * MB, f"peak {peak:,} bytes"


async def test_corrupt_gzip_is_a_clear_failure(site: Site) -> None:
    error = await crawl_error(site.url("/corrupt-gzip"), "CrawlFailed")
    assert error.message.startswith(f"Could not crawl {site.url('/corrupt-gzip')}: its compressed body is corrupt (")


# ------------------------------------------------------------------------- HTTP errors


async def test_client_error_is_not_retryable(site: Site) -> None:
    error = await crawl_error(site.url("/status/404"), "CrawlFailed")
    assert error.message == f"Could not crawl {site.url('/status/404')}: the server answered HTTP 404"


@pytest.mark.parametrize("status", [429, 503])
async def test_server_errors_are_retryable(site: Site, status: int) -> None:
    error = await crawl_error(site.url(f"/status/{status}"), "CrawlUnavailable")
    assert f"the server answered HTTP {status}" in error.message


async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    error = await crawl_error(f"http://127.0.0.1:{port}/", "CrawlUnavailable")
    assert "ConnectError" in error.message


async def test_unknown_host_is_not_retryable() -> None:
    error = await crawl_error("http://nowhere.test/", "CrawlFailed")
    assert "could not resolve host 'nowhere.test'" in error.message


# ------------------------------------------------------------------------------ https pinning


def _tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a leaf certificate for ``secure.test``: (ca.pem, leaf.pem, key.pem)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject: str, key: Any, issuer: str, signer: Any, *, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = certificate("Crawl Test CA", ca_key, "Crawl Test CA", ca_key, ca=True)
    leaf_cert = certificate("secure.test", leaf_key, "Crawl Test CA", ca_key, ca=False)
    paths = directory / "ca.pem", directory / "leaf.pem", directory / "key.pem"
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf_cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@dataclass
class TlsSite:
    server: SiteServer
    ca_file: Path
    sni: list[str | None]


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsSite]:
    ca_file, leaf_file, key_file = _tls_files(tmp_path_factory.mktemp("tls"))
    sni: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(leaf_file, key_file)
    context.sni_callback = lambda _sock, name, _ctx: sni.append(name)  # type: ignore[assignment,func-returns-value]
    server = SiteServer("127.0.0.1", SiteLog())
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield TlsSite(server, ca_file, sni)
    server.shutdown()
    server.server_close()


@pytest.fixture
def trust_test_ca(tls_site: TlsSite, sealed_network: Network, monkeypatch: pytest.MonkeyPatch) -> None:
    """The crawler trusts the test CA, and ``secure.test``/``other.test`` resolve to 127.0.0.1."""
    context = ssl.create_default_context(cafile=str(tls_site.ca_file))
    monkeypatch.setattr(
        fetch,
        "build_transport",
        lambda: LoopbackOnlyTransport(
            httpx.AsyncHTTPTransport(verify=context, retries=0, trust_env=False), sealed_network.requests
        ),
    )
    monkeypatch.setitem(FAKE_DNS, "secure.test", ["127.0.0.1"])
    monkeypatch.setitem(FAKE_DNS, "other.test", ["127.0.0.1"])


@pytest.mark.usefixtures("trust_test_ca")
async def test_https_pins_the_address_but_verifies_the_name(tls_site: TlsSite, sealed_network: Network) -> None:
    """Connect to 127.0.0.1, yet send SNI and check the certificate for ``secure.test``."""
    tls_site.sni.clear()
    url = f"https://secure.test:{tls_site.server.port}/article"
    result = await run(url)
    assert ARTICLE_SENTENCE in result.markdown
    assert result.url == url
    assert tls_site.sni == ["secure.test"]
    assert sealed_network.requests == [f"127.0.0.1:{tls_site.server.port}/article"]
    assert tls_site.server.log.host_headers["/article"] == f"secure.test:{tls_site.server.port}"


@pytest.mark.usefixtures("trust_test_ca")
async def test_https_certificate_must_match_the_name(tls_site: TlsSite) -> None:
    error = await crawl_error(f"https://other.test:{tls_site.server.port}/article", "CrawlFailed")
    assert "its TLS certificate was rejected" in error.message
    assert "Hostname mismatch" in error.message


# ------------------------------------------------------------------- extraction, pure


def test_prepare_html_drops_invisible_elements() -> None:
    document = (
        "<html><head><title> A  page </title><style>.x{color:red}</style></head><body>"
        "<script>var SECRETJS = 1;</script><!-- COMMENTTEXT --><noscript>NOSCRIPTTEXT</noscript>"
        "<h1>Heading</h1><p>First <b>bold</b> paragraph.</p><table><tr><td>c1</td><td>c2</td></tr></table>"
        "</body></html>"
    )
    prepared = page_text.prepare_html(document, 1000)
    assert prepared.title == "A page"
    for hidden in ("SECRETJS", "COMMENTTEXT", "NOSCRIPTTEXT", "color:red"):
        assert hidden not in prepared.markup
        assert hidden not in prepared.plain_text
    assert prepared.plain_text == "Heading\nFirst bold paragraph.\nc1 c2"


def test_prepare_html_bounds_its_work(monkeypatch: pytest.MonkeyPatch) -> None:
    document = "<html><body>" + "<p>word</p>" * 5000 + "</body></html>"
    monkeypatch.setattr(page_text, "EXTRACT_INPUT_CHARS", 1000)
    prepared = page_text.prepare_html(document, 100)
    assert len(prepared.markup) == 1000
    assert 100 <= len(prepared.plain_text) <= 250
    monkeypatch.setattr(page_text, "MAX_WALK_EVENTS", 10)
    # 10 events: <body> start, then start/end of <p> four and a half times.
    assert page_text.prepare_html(document, 100).plain_text == "\n".join(["word"] * 5)


@pytest.mark.parametrize(
    ("body", "header", "expected"),
    [
        ('<meta charset="utf-8"><p>café'.encode("cp1252"), "windows-1252", "café"),  # header wins
        (b"\xef\xbb\xbf<p>caf\xc3\xa9", "iso-8859-1", "café"),  # BOM wins
        ('<meta charset="bogus-charset"><p>caf\u00e9'.encode(), None, "café"),  # unknown label: guess
        ('<?xml version="1.0" encoding="koi8-r"?><p>мир'.encode("koi8-r"), None, "мир"),
    ],
)
def test_charset_precedence(body: bytes, header: str | None, expected: str) -> None:
    assert expected in decode.decode_body(body, header)


def test_cut_at_break_cuts_at_a_boundary() -> None:
    assert crawl.cut_at_break("short", 10) == ("short", False)
    text, truncated = crawl.cut_at_break("alpha beta gamma delta", 18)
    assert (text, truncated) == ("alpha beta gamma", True)


def test_crawls_share_one_verifying_tls_context() -> None:
    """Building a context loads the CA bundle (~40 ms of CPU): each crawl's transport reuses one,
    which still checks certificates and host names."""
    first, second = fetch.build_transport(), fetch.build_transport()  # wrapped by sealed_network
    assert isinstance(first, LoopbackOnlyTransport) and isinstance(second, LoopbackOnlyTransport)
    context = first.inner._pool._ssl_context  # type: ignore[attr-defined]
    assert context is second.inner._pool._ssl_context  # type: ignore[attr-defined]
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
