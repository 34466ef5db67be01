"""``render_slides``: a composed ``Deck`` as a real ``.pptx``, written with python-pptx.

An activity because it is I/O (a library that builds a zip file, then the blob store) that must
not run in the workflow sandbox. Titles go in the
layout's title placeholder, bullets in its body placeholder, tables as real PowerPoint tables (a
header row and the rows, padded to the header's width), so the file opens editable anywhere.
"""

from __future__ import annotations

import io
from typing import Any

from temporalio import activity

from config.settings import Settings
from runtime import artefacts
from workflows.contracts.artefact import ArtefactRef
from workflows.contracts.slides import Deck, Slide

TITLE_LAYOUT = 0
CONTENT_LAYOUT = 1
TITLE_ONLY_LAYOUT = 5


class SlideActivities:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @activity.defn(name="render_slides")
    async def render_slides(self, deck: Deck) -> ArtefactRef:
        """The deck's file, written to the blob store: history keeps only its reference."""
        return await artefacts.put(self.settings, render(deck))


def render(deck: Deck) -> bytes:
    from pptx import Presentation  # imported on first use: the worker polls before it loads

    presentation = Presentation()
    cover = presentation.slides.add_slide(presentation.slide_layouts[TITLE_LAYOUT])
    cover.shapes.title.text = deck.title
    cover.placeholders[1].text = deck.subtitle
    for slide in deck.slides:
        _add(presentation, slide)
    buffer = io.BytesIO()
    presentation.save(buffer)
    return buffer.getvalue()


def _add(presentation: Any, slide: Slide) -> None:
    from pptx.util import Inches as inches

    layout = CONTENT_LAYOUT if slide.bullets and not slide.table else TITLE_ONLY_LAYOUT
    page = presentation.slides.add_slide(presentation.slide_layouts[layout])
    page.shapes.title.text = slide.title
    top = 1.5
    if layout == CONTENT_LAYOUT:
        body = page.placeholders[1].text_frame
        body.text = slide.bullets[0]
        for bullet in slide.bullets[1:]:
            body.add_paragraph().text = bullet
        return
    if slide.bullets:
        box = page.shapes.add_textbox(inches(0.5), inches(top), inches(9), inches(0.4 * len(slide.bullets)))
        box.text_frame.word_wrap = True
        box.text_frame.text = f"• {slide.bullets[0]}"
        for bullet in slide.bullets[1:]:
            box.text_frame.add_paragraph().text = f"• {bullet}"
        top += 0.4 * len(slide.bullets) + 0.2
    if slide.table:
        header, rows = slide.table.header, slide.table.rows
        shape = page.shapes.add_table(len(rows) + 1, len(header), inches(0.5), inches(top), inches(9),
                                      inches(0.4 * (len(rows) + 1)))
        for column, text in enumerate(header):
            shape.table.cell(0, column).text = text
        for row, cells in enumerate(rows, start=1):
            for column in range(len(header)):
                shape.table.cell(row, column).text = cells[column] if column < len(cells) else ""
