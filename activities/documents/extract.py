"""Turning one local file (its bytes) into a title and plain text for the document index.

Why it is built this way:

* Only formats whose text can be read reliably are supported (``SUPPORTED_SUFFIXES``, config/resources.py);
  anything else is skipped by the caller, not guessed at.
* It takes the bytes rather than a path: the index reads each file once, hashes the bytes to
  decide whether anything changed, and only then pays for extraction.
* HTML goes through the crawler's cheap lxml pass (title, script/style removal, a plain-text
  fallback) and then trafilatura for the main text; if trafilatura finds nothing (short pages
  often look like boilerplate to it) the plain text is used, so a page is never indexed empty.
* Decoding tries strict UTF-8 first (what nearly every local file is), then the crawler's
  BOM / ``<meta charset>`` / detection chain.
* HTML and PDF are extracted in a child process (:mod:`activities.support.isolated`) with CPU and
  memory rlimits, killed after :data:`EXTRACT_BUDGET_SECONDS`: a user's document is as
  untrusted as a web page, and a hostile PDF can keep pypdf busy for minutes. Markdown and text
  are only decoded, which is linear, so they stay in the calling thread.
* Failures raise :class:`ExtractionError`; the index records the file as unreadable so it is not
  retried on every search until its content changes.
* The extraction fork server imports this module for its job (:func:`_extract_job`), so its
  imports stay light: settings are only a type here.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from activities.support.isolated import Limits, run_blocking
from activities.web.decode import decode_body
from activities.web.page_text import prepare_html, trafilatura_markdown
from config.resources import HTML_SUFFIXES, MARKDOWN_SUFFIXES, SUPPORTED_SUFFIXES

if TYPE_CHECKING:
    from pypdf import PageObject

    from config.settings import Settings

MAX_TEXT_CHARS = 5_000_000  # of one document; more is cut (a 2,000-page PDF is ~5 M chars)
MAX_TITLE_CHARS = 200
# Whole-document extraction (every page of a PDF) in one child; ~40 ms a page for an ordinary PDF.
EXTRACT_BUDGET_SECONDS = 60.0

# An ATX heading's text: the line after its marks, up to its last character that is not a blank or
# "#" (or its first character, when there is no such one). It is what r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$"
# finds, without that pattern's lazy group trying the trailing run at every position of the line
# (a heading with 20,000 blanks inside took 20 s).
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*[^ \t#\n]|.)[ \t#]*$", re.MULTILINE)
_QUOTES = "\"'"
_NUL = re.compile("\x00")


class ExtractionError(Exception):
    """The file could not be read as the format its name claims."""


@dataclass(frozen=True)
class ExtractedDocument:
    title: str
    text: str


def is_supported(path: Path) -> bool:
    """Whether a file's extension is one the index can read."""
    return path.suffix.lower() in SUPPORTED_SUFFIXES


def extract_document(path: Path, data: bytes, settings: Settings) -> ExtractedDocument:
    """Title and text of ``data``, read as the format ``path``'s extension names."""
    suffix = path.suffix.lower()
    if suffix == ".pdf" or suffix in HTML_SUFFIXES:
        title, text = _isolated(suffix, data, settings)
    elif suffix in MARKDOWN_SUFFIXES:
        text = decode_text(data)
        title = markdown_title(text)
    elif suffix == ".txt":
        title, text = None, decode_text(data)
    else:
        raise ExtractionError(f"unsupported file type {suffix or '(none)'!r}")
    return ExtractedDocument(title=_clean_title(title) or path.name, text=_NUL.sub("", text)[:MAX_TEXT_CHARS])


def _isolated(suffix: str, data: bytes, settings: Settings) -> tuple[str | None, str]:
    """(title, text) of an HTML or PDF document, from a child process on a budget."""
    budget = EXTRACT_BUDGET_SECONDS
    outcome = run_blocking(_extract_job, data, (suffix,), [budget], Limits.for_budget(budget, settings))
    if outcome.timed_out_after is not None:
        raise ExtractionError(f"extraction took longer than {budget:g} s")
    if outcome.error is not None:  # "Type: message", from the child
        raise ExtractionError(outcome.error.removeprefix(f"{ExtractionError.__name__}: "))
    title, text = outcome.values[0]
    return title, text


def _extract_job(data: bytes, suffix: str) -> Iterator[tuple[str | None, str]]:
    """In the child: (title, text), the text already cut to :data:`MAX_TEXT_CHARS` for the pipe."""
    title, text = _pdf(data) if suffix == ".pdf" else _html(decode_text(data))
    yield title, text[:MAX_TEXT_CHARS]


def decode_text(data: bytes) -> str:
    """Strict UTF-8 (with or without BOM) first, then BOM, ``<meta charset>`` and detection."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return decode_body(data, None)


def markdown_title(text: str) -> str | None:
    """The front-matter ``title:``, else the first ATX heading (``# Title``), else None."""
    titled = front_matter_title(front_matter(text))
    if titled is not None:
        return titled
    match = _HEADING.search(text[:20_000])
    return match.group(1) if match else None


def front_matter_title(front: str) -> str | None:
    """The first ``title:`` line's value, one pair of quotes and the blanks around it taken off:
    what r"^title:[ \t]*[\"']?(.+?)[\"']?[ \t]*$" (re.MULTILINE) finds, in one pass per line."""
    for line in front.split("\n"):
        if not line.startswith("title:"):
            continue
        value = line[len("title:"):]
        blanks = len(value) - len(value.lstrip(" \t"))
        rest = value[blanks:]
        if rest[:1] in _QUOTES and len(rest) > 1:  # an opening quote, with something after it
            rest = rest[1:]
        elif not rest:  # only blanks: the shortest title is the last of them
            rest = value[-1:]
        if not rest:
            continue
        kept = rest.rstrip(" \t")
        if not kept:
            return rest[0]
        return kept[:-1] if kept[-1] in _QUOTES and len(kept) > 1 else kept
    return None


def front_matter(text: str) -> str:
    """The YAML block between a leading ``---`` line and the next ``---`` line, or ""."""
    if not text.startswith("---"):
        return ""
    end = text.find("\n---", 3, 4000)
    return text[3:end] if end > 0 else ""


def _html(document: str) -> tuple[str | None, str]:
    """(``<title>`` or first heading, main text) of an HTML document."""
    prepared = prepare_html(document, MAX_TEXT_CHARS)
    main = trafilatura_markdown(prepared.markup, include_links=False)
    text = main or prepared.plain_text
    return prepared.title or markdown_title(text), text


def _pdf(data: bytes) -> tuple[str | None, str]:
    """(metadata title, text of every page, pages separated by blank lines) of a PDF."""
    from pypdf import PdfReader  # local import: only PDFs pay for loading pypdf

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            reader.decrypt("")
        pages = [_page_text(page) for page in reader.pages]
        title = reader.metadata.title if reader.metadata else None
    except Exception as exc:  # pypdf raises many types for broken or encrypted files
        raise ExtractionError(f"unreadable PDF: {type(exc).__name__}: {exc}") from exc
    return (title if isinstance(title, str) else None), "\n\n".join(page for page in pages if page.strip())


def _page_text(page: PageObject) -> str:
    """One page's text; a page pypdf cannot parse is skipped rather than failing the document."""
    try:
        return page.extract_text() or ""
    except Exception:
        return ""


def _clean_title(title: str | None) -> str | None:
    """One line, without markdown emphasis, capped; None when nothing is left."""
    if not title:
        return None
    cleaned = " ".join(title.replace("*", "").replace("`", "").split())
    if len(cleaned) > MAX_TITLE_CHARS:
        cleaned = cleaned[: MAX_TITLE_CHARS - 3].rstrip() + "..."
    return cleaned or None
