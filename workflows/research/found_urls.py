"""The URLs a research step has found, known by where each came from, never scraped from the conversation's text.

Why (issue #42, item 7): JSON tool mode offered a ``url`` argument every URL found in the text of
the conversation's user and tool messages, and a search that finds nothing answers
``No results found for '<query>'.``: a small model that searched for a URL it had made up
(SmolLM2-135M and Gemma-3-270M on llama-server searched made-up amazon.com and Wikipedia cache
addresses) was then offered that URL to crawl. Tool messages echo the model's own words in many
places (every error quotes its arguments), and a model given tools natively could crawl anything.

So a step's found URLs are collected as its tools return, from the results themselves: the
question's and the plan's, each web search's result URLs (the run's background investigation's too:
:func:`background_urls`), the user's documents' (a result's address and the URLs its text holds),
and a crawled page's (its address and the URLs its text holds). Never
a tool's error, the Python tool's output or an MCP server's (which may echo its arguments too).
Only these may be crawled, in either tool mode (``workflows/research/tools.py``), and JSON mode's ``url``
argument offers the newest of them no call has used yet (:meth:`FoundUrls.choices`).

Pure and linear: text is scanned once, with a single character class, and only so far.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.chat import ChatMessage
    from workflows.contracts.plan import Plan
    from workflows.research.messages import BACKGROUND_INVESTIGATION

# A URL offered to JSON mode stays under llama.cpp's grammar repetition limit (activities/model/json_tools.py).
MAX_URL_CHARS = 1_999
URL_CHOICES = 32  # the newest URLs JSON mode offers: a step's searches give about that many
URLS_PER_TEXT = 64  # taken from one page, document or plan: its first ones
SCANNED_CHARS = 1_000_000  # of one text; a page is capped far below (DEERFLOW_CRAWL_MAX_CHARS)
URL_ARGUMENT = "url"  # an argument of this name takes a URL (crawl_tool's; an MCP fetch tool's alike)
_SCHEMES = ("https://", "http://")
_URL_BODY = re.compile(r"[^\s\"'<>()\[\]{}\\^`|]*")  # one class, no alternatives: linear in any engine
_TRAILING = ".,;:!?"


def urls_in(text: str, limit: int = URLS_PER_TEXT) -> list[str]:
    """The first ``limit`` http(s) URLs written in ``text``, as written (trailing punctuation left out)."""
    text = text[:SCANNED_CHARS]
    urls: list[str] = []
    start = text.find("http")
    while start >= 0 and len(urls) < limit:
        scheme = next((scheme for scheme in _SCHEMES if text.startswith(scheme, start)), None)
        if scheme is None:
            start = text.find("http", start + 4)
            continue
        body = _URL_BODY.match(text, start + len(scheme))
        end = body.end() if body else start + len(scheme)
        url = text[start:end].rstrip(_TRAILING)
        if len(url) > len(scheme):
            urls.append(url)
        start = text.find("http", max(end, start + len(scheme)))
    return urls


def url_key(url: str) -> str:
    """Same page, same key: scheme and host are case-insensitive and the fragment is not sent.

    A URL that does not parse (the model wrote it) is its own key; the crawl activity refuses it
    with a message, where a ValueError here would fail the workflow task.
    """
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return url.strip()
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", parts.query, ""))


def task_urls(question: str, plan: Plan) -> list[str]:
    """What a step's task makes found: the URLs the person's question and the plan hold (not the
    earlier steps' findings, which are a model's words)."""
    texts = [question, plan.title, plan.thought, *(f"{step.title}\n{step.description}" for step in plan.steps)]
    return [url for text in texts for url in urls_in(text)]


def background_urls(planner_messages: Iterable[ChatMessage]) -> list[str]:
    """The result URLs of the run's background investigation, from the planner's message that holds them
    (``workflows.research.messages.background_message``: our own JSON of the results). Each result's ``url`` only:
    not the search's query (the coordinator model's research topic, as a model wrote it), nor the URLs a
    result's text holds (a step's own web search counts none of those either). None when the run made
    no background search, or the message is not that JSON (a state from elsewhere): never a failure."""
    for message in planner_messages:
        if message.name == BACKGROUND_INVESTIGATION:
            try:
                results = json.loads(message.content.partition("\n")[2])
            except (ValueError, RecursionError):
                return []
            return [result["url"] for result in (results if isinstance(results, list) else [])
                    if isinstance(result, dict) and isinstance(result.get("url"), str)]
    return []


class FoundUrls:
    """One step's found URLs, oldest first, each kept as it was found."""

    def __init__(self, urls: Iterable[str] = ()) -> None:
        self._found: dict[str, str] = {}
        self.add(urls)

    def add(self, urls: Iterable[str]) -> None:
        for url in urls:
            if url.startswith(_SCHEMES) and len(url) <= MAX_URL_CHARS:
                key = url_key(url)
                self._found.pop(key, None)  # found again: among the newest
                self._found[key] = url

    def holds(self, url: str) -> bool:
        return url_key(url) in self._found

    def choices(self, messages: list[ChatMessage], limit: int = URL_CHOICES) -> list[str]:
        """The newest ``limit`` found URLs that no call of ``messages`` has passed as its ``url`` yet."""
        used = {url_key(str(call.arguments.get(URL_ARGUMENT))) for message in messages
                for call in message.tool_calls if URL_ARGUMENT in call.arguments}
        return [url for key, url in self._found.items() if key not in used][-limit:]
