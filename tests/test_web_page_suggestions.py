"""Our page in headless Chromium suggests questions the offline demonstration's corpus answers.

A new user's own question mostly got "the offline corpus has nothing on …" in every step; the page
offers a few the corpus covers (tests/test_offline_demo.py runs each one through the demo), and a
click puts one in the question box, under the page's Content-Security-Policy. With real providers
configured the corpus does not matter, and the suggestions stay hidden.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from config.settings import load_settings
from tests.support.cdp import Page, chromium_path
from tests.support.web_server import api_server
from tests.test_offline_demo import suggested_questions

CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"),
    pytest.mark.timeout(120),
]
SCREENSHOTS = Path("/tmp/our-page")  # kept outside pytest's tmp dir for a person to look at
SUGGESTIONS = "[...document.querySelectorAll('#suggestions button')].map((b) => b.textContent)"
STARTED = "window.deerflowPage !== undefined && window.deerflowPage.started"


async def test_a_clicked_suggestion_fills_the_question_box(client: Client, page: Page) -> None:
    async with api_server(client, load_settings().model_copy(update={"web_token": None})) as base:
        await page.navigate(f"{base}/")
        await page.wait_for("!document.getElementById('suggestions').hidden", what="the suggestions")
        shown = await page.evaluate(SUGGESTIONS)
        assert shown == suggested_questions()[1]
        await page.press("#suggestions button:nth-of-type(3)")
        assert await page.evaluate("document.getElementById('question').value") == shown[2]
        assert await page.evaluate("document.activeElement.id") == "question"
        assert await page.evaluate("document.getElementById('run').hidden")  # filled, not started
        SCREENSHOTS.mkdir(exist_ok=True)
        await page.screenshot(SCREENSHOTS / "suggestions.png")
        assert not [line for line in page.console if "Content Security Policy" in line], page.console


async def test_real_providers_get_no_corpus_suggestions(client: Client, page: Page) -> None:
    real = load_settings(environ={"OPENAI_API_KEY": "sk-test", "TAVILY_API_KEY": "tvly-test"})
    async with api_server(client, real.model_copy(update={"web_token": None})) as base:
        await page.navigate(f"{base}/")
        await page.wait_for(STARTED, what="the page")
        await page.wait_for("document.getElementById('offline').hidden", what="no offline banner")
        assert await page.evaluate("document.getElementById('suggestions').hidden")
