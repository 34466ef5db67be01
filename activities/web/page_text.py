"""A page's title and text from its bytes: what runs inside an extraction child.

Why a module of its own: the extraction fork server (:mod:`activities.support.isolated`) imports
this once and every child is forked from it, so it imports only what extraction needs (lxml,
the decoder; trafilatura and pypdf on first use), not the worker's settings, HTTP client or
Temporal SDK. That keeps the fork server's start (a second of CPU less per worker) and each
fork small. The budgets and the child are :mod:`activities.web.extract`'s.

Decoding (:mod:`activities.web.decode`) and an lxml pass (drops scripts and styles, finds the
title, makes a plain-text fallback) are linear; trafilatura (markdown) and pypdf are not.
Malformed markup, or trafilatura over its budget, degrades to plain text. The cheap pass
(:func:`prepare_html`) is also what the local document index uses for HTML.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lxml.html
from lxml import etree

from activities.web.decode import META_SCAN_BYTES, decode_body

if TYPE_CHECKING:
    from activities.web.fetch import Kind

MAX_WALK_EVENTS = 200_000
EXTRACT_INPUT_CHARS = 1_000_000
MAX_TITLE_CHARS = 200
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


def page_job(body: bytes, charset: str | None, kind: Kind, url: str, max_chars: int) -> Iterator[Any]:
    """In the child: (title, plain text) from the linear pass, then trafilatura's markdown or None."""
    text = decode_body(body, charset)
    if kind == "text":
        yield None, text
        return
    prepared = prepare_html(text, max_chars)
    yield prepared.title, prepared.plain_text
    yield trafilatura_markdown(prepared.markup, url)


def pdf_job(body: bytes, max_chars: int) -> Iterator[tuple[str | None, str]]:
    """In the child: (title, text) of a PDF."""
    yield extract_pdf(body, max_chars)


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


def trafilatura_markdown(markup: str, url: str | None = None, *, include_links: bool = True) -> str | None:
    """Main content as markdown, or None when trafilatura finds none (or fails on hostile markup:
    the caller falls back to plain text). Web pages keep their links (the agent may follow them);
    local documents drop them (``activities/documents/extract.py``)."""
    import trafilatura  # here: only extraction children run this, so the worker never pays its import

    try:
        markdown = trafilatura.extract(
            markup,
            url=url,
            output_format="markdown",
            include_links=include_links,
            include_tables=True,
            include_images=False,
            include_comments=False,
            favor_recall=True,
        )
    except Exception:  # trafilatura on hostile markup
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
