"""Presentation contracts: DeerFlow's request, the composer's deck (a bounded schema) and the file.

The composer's reply is model output: it is parsed into ``Deck`` with every list and string cut
to the bounds below (never rejected for being long), and a reply with no slide at all is an error
that names the problem, so a rendered file always has real content and a bounded size.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, StrictStr

from workflows.contracts.artefact import ArtefactRef
from workflows.contracts.base import Contract
from workflows.contracts.evaluation import MAX_CONTENT_CHARS
from workflows.contracts.usage import Usage
from workflows.text.reply_json import reply_json

SLIDES_WORKFLOW = "SlideComposerWorkflow"
PPTX_MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
COMPOSER_REPORT_CHARS = 60_000
MAX_SLIDES = 30
MAX_BULLETS = 8
MAX_COLUMNS = 6
MAX_ROWS = 12
MAX_TITLE = 150
MAX_TEXT = 300
MAX_CELL = 100


class SlidesRequest(Contract):
    """DeerFlow's body: the report and its locale."""

    model_config = ConfigDict(extra="ignore")

    content: StrictStr = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    locale: StrictStr = Field(default="en-US", pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?$")


class Table(Contract):
    header: list[str] = Field(default_factory=list, max_length=MAX_COLUMNS)
    rows: list[list[str]] = Field(default_factory=list, max_length=MAX_ROWS)


class Slide(Contract):
    title: str = Field(max_length=MAX_TITLE)
    bullets: list[str] = Field(default_factory=list, max_length=MAX_BULLETS)
    table: Table | None = None


class Deck(Contract):
    title: str = Field(max_length=MAX_TITLE)
    subtitle: str = Field(default="", max_length=MAX_TEXT)
    slides: list[Slide] = Field(max_length=MAX_SLIDES)


class SlidesResult(Contract):
    """The deck as composed and its ``.pptx`` file, in the blob store."""

    deck: Deck
    pptx: ArtefactRef
    usage: Usage = Field(default_factory=Usage)


class NoDeck(ValueError):
    """The composer's reply holds no usable slide."""


def _text(value: Any, limit: int) -> str:
    return " ".join(str(value).split())[:limit] if isinstance(value, str | int | float) else ""


def _cells(value: Any, limit: int) -> list[str]:
    return [_text(cell, MAX_CELL) for cell in value[:limit]] if isinstance(value, list) else []


def _table(value: Any) -> Table | None:
    if not isinstance(value, dict):
        return None
    header = _cells(value.get("header"), MAX_COLUMNS)
    rows = value.get("rows") if isinstance(value.get("rows"), list) else []
    cells = [_cells(row, len(header)) for row in rows[:MAX_ROWS] if isinstance(row, list)]
    return Table(header=header, rows=cells) if header and cells else None


def _slide(value: Any) -> Slide | None:
    if not isinstance(value, dict):
        return None
    title = _text(value.get("title"), MAX_TITLE)
    raw = value.get("bullets")
    bullets = [b for b in (_text(item, MAX_TEXT) for item in (raw if isinstance(raw, list) else [])) if b]
    table = _table(value.get("table"))
    if not title or not (bullets or table):
        return None
    return Slide(title=title, bullets=bullets[:MAX_BULLETS], table=table)


def deck_from_reply(reply: str) -> Deck:
    """The composer's JSON reply as a bounded ``Deck``; ``NoDeck`` if it has no usable slide."""
    try:
        value = reply_json(reply)
    except ValueError as error:
        raise NoDeck(f"the composer's reply is not JSON ({error})") from None
    if not isinstance(value, dict) or not isinstance(value.get("slides"), list):
        raise NoDeck("the composer's reply has no list of slides")
    slides = [slide for slide in map(_slide, value["slides"]) if slide is not None][:MAX_SLIDES]
    if not slides:
        raise NoDeck("the composer's reply has no slide with a title and content")
    return Deck(title=_text(value.get("title"), MAX_TITLE) or slides[0].title,
                subtitle=_text(value.get("subtitle"), MAX_TEXT), slides=slides)
