"""Podcast contracts: DeerFlow's request, the script writer's two-voice script (bounded), the result.

The script is model output, parsed leniently into DeerFlow's ``Script`` shape (``speaker`` male or
female, ``paragraph`` plain text): unknown speakers alternate, lines are cut to what one speech
request takes, and the count is capped, so the number of speech activities is bounded whatever
the model writes.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import ConfigDict, Field, StrictStr

from workflows.contracts.artefact import ArtefactRef
from workflows.contracts.base import Contract
from workflows.contracts.evaluation import MAX_CONTENT_CHARS
from workflows.contracts.usage import Usage
from workflows.text.markdown_links import links
from workflows.text.reply_json import reply_json

PODCAST_WORKFLOW = "PodcastWorkflow"
WRITER_REPORT_CHARS = 60_000
MAX_LINES = 40
MAX_LINE_CHARS = 1_000  # DeerFlow sends at most 1,024 characters per speech request
NO_VOICE = "NoVoice"
NO_VOICE_MESSAGE = ("No text-to-speech voice is configured (set DEERFLOW_TTS_URL to an OpenAI-compatible "
                    "/v1 endpoint, or VOLCENGINE_TTS_APPID and VOLCENGINE_TTS_ACCESS_TOKEN); the podcast script "
                    "is still available.")
# Markdown's emphasis, code, heading and quote marks.
_MARKS = re.compile(r"[*_`#>]+")

Speaker = Literal["male", "female"]


class PodcastRequest(Contract):
    """DeerFlow's body: the report."""

    model_config = ConfigDict(extra="ignore")

    content: StrictStr = Field(min_length=1, max_length=MAX_CONTENT_CHARS)


class ScriptLine(Contract):
    speaker: Speaker = "male"
    paragraph: str = Field(max_length=MAX_LINE_CHARS)


class Script(Contract):
    locale: Literal["en", "zh"] = "en"
    lines: list[ScriptLine] = Field(max_length=MAX_LINES)


class SpeechRequest(Contract):
    """One line for the ``speak`` activity: the text and which of the operator's voices reads it."""

    text: str = Field(min_length=1, max_length=MAX_LINE_CHARS)
    speaker: Speaker = "male"


class PodcastResult(Contract):
    """The script, and the joined audio in the blob store (None: no voice is configured; ``note`` says so)."""

    script: Script
    audio: ArtefactRef | None = None
    note: str | None = None
    usage: Usage = Field(default_factory=Usage)


class NoScript(ValueError):
    """The script writer's reply holds no line to speak."""


def without_markup(text: str) -> str:
    r"""``text`` without markdown marks, each link or image as its label: what
    ``re.sub(r"[*_`#>]+|!?\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", text)`` gives, in one
    pass (that pattern scans from every "[" to the next "]" and ")": quadratic in a model's reply)."""
    pieces, position = [], 0
    for link in links(text, "[", "any"):
        image = link.start > position and text[link.start - 1] == "!"  # "![": the "!" goes with the link
        pieces += [_MARKS.sub("", text[position:link.start - 1 if image else link.start]),
                   text[link.start + 1:link.label_end]]
        position = link.end
    pieces.append(_MARKS.sub("", text[position:]))
    return "".join(pieces)


def _plain(text: str) -> str:
    return " ".join(without_markup(text).split())[:MAX_LINE_CHARS]


def script_from_reply(reply: str) -> Script:
    """The writer's JSON reply as a bounded ``Script``; ``NoScript`` when nothing is speakable."""
    try:
        value = reply_json(reply)
    except ValueError as error:
        raise NoScript(f"the script writer's reply is not JSON ({error})") from None
    raw = value.get("lines") if isinstance(value, dict) else None
    if not isinstance(raw, list):
        raise NoScript("the script writer's reply has no list of lines")
    lines: list[ScriptLine] = []
    for item in raw:
        if len(lines) == MAX_LINES:
            break
        paragraph = _plain(item.get("paragraph", "")) if isinstance(item, dict) and isinstance(
            item.get("paragraph"), str) else ""
        if not paragraph:
            continue
        speaker = item.get("speaker")
        if speaker not in ("male", "female"):
            speaker = "male" if len(lines) % 2 == 0 else "female"
        lines.append(ScriptLine(speaker=speaker, paragraph=paragraph))
    if not lines:
        raise NoScript("the script writer's reply has no line to speak")
    return Script(locale="zh" if isinstance(value, dict) and value.get("locale") == "zh" else "en", lines=lines)


def script_text(script: Script) -> str:
    """The script as a reader sees it: one ``Speaker: text`` line each."""
    return "\n\n".join(f"{line.speaker.capitalize()}: {line.paragraph}" for line in script.lines)


class TTSRequest(Contract):
    """DeerFlow's ``/api/tts`` body; like DeerFlow, only the first characters are read aloud.
    Its Volcengine-only knobs (speed, volume, pitch ratios, frontend) are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    text: StrictStr = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    encoding: Literal["mp3"] = "mp3"

    def speech(self) -> SpeechRequest:
        return SpeechRequest(text=self.text[:MAX_LINE_CHARS])
