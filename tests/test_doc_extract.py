"""``doc_extract`` on hostile local documents: HTML and PDF run in a killable child process."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from activities.documents import extract as doc_extract
from activities.support import isolated
from config.settings import Settings
from tests.support.documents import ARTICLE_HTML, ARTICLE_SENTENCE, make_pdf, make_slow_pdf

SETTINGS = Settings()  # the default extraction limits


@pytest.fixture(scope="module", autouse=True)
def fork_server() -> None:
    isolated.start_fork_server(SETTINGS)


def test_a_slow_pdf_is_stopped_at_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doc_extract, "EXTRACT_BUDGET_SECONDS", 1.0)
    started = time.monotonic()
    with pytest.raises(doc_extract.ExtractionError, match=r"^extraction took longer than 1 s$"):
        doc_extract.extract_document(Path("report.pdf"), make_slow_pdf(pages=8, operators=150_000), SETTINGS)
    assert time.monotonic() - started < 3


def test_pdf_and_html_come_back_from_the_child() -> None:
    pdf = doc_extract.extract_document(Path("a.pdf"), make_pdf("Vent fauna survey PDFMARKER", "Vent Report"), SETTINGS)
    assert (pdf.title, pdf.text) == ("Vent Report", "Vent fauna survey PDFMARKER")
    html = doc_extract.extract_document(Path("vents.html"), ARTICLE_HTML.encode(), SETTINGS)
    assert html.title == "Life at the Vents"
    assert ARTICLE_SENTENCE in html.text


def test_a_broken_pdf_is_an_extraction_error() -> None:
    with pytest.raises(doc_extract.ExtractionError, match=r"^unreadable PDF: "):
        doc_extract.extract_document(Path("bad.pdf"), b"%PDF-1.4\nnot really", SETTINGS)
