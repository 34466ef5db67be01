"""What the scripted agents read and write: chat messages, the answers' sections, sentences.

Shared by every scripted agent (``offline.scripted_agents`` and the modules it dispatches to).
Nothing here does I/O: everything is read from the request body the workflow sent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LOCALE_RE = re.compile(r"Locale:\s*([A-Za-z]{2,3}-[A-Za-z]{2,4})")
HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
# The user's own documents are cited as document:// links (file:// before), web sources as http(s).
LINK_RE = re.compile(r"(?<!!)\[([^\]\n]+)\]\(((?:https?|file|document)://[^)\s]+)\)")
BULLET_TITLE_RE = re.compile(r"(?m)^[-*]\s+\*\*[^*\n]+\*\*[:：]\s*")  # "- **Source title**: "


@dataclass(frozen=True)
class ScriptedToolCall:
    """A tool call the scripted agent wants to make; ``id`` is ``call_<n>``, unique per chat."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ScriptedReply:
    """What the model says: text, or tool calls (then ``content`` is empty)."""

    content: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    agent: str | None = None


# ---------------------------------------------------------------- message helpers


def text_of(content: Any) -> str:
    """Message content as plain text; OpenAI allows a list of typed parts as well as a string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def system_text(messages: list[dict[str, Any]]) -> str:
    """All system text: the agent's role and the ``Locale:``/step-limit/style lines live there."""
    return "\n".join(text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer"))



def is_chinese(text: str) -> bool:
    """Han characters present: DeerFlow's rule for answering (and researching) in zh-CN."""
    return bool(HAN_RE.search(text))


def zh_wanted(locale: str) -> bool:
    """Chinese output wanted; every other locale gets English, the demo's only other language."""
    return locale.lower().startswith("zh")


def user_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m.get("role") == "user"]


def tool_outputs(messages: list[dict[str, Any]]) -> list[str]:
    return [text_of(m.get("content")) for m in messages if m.get("role") == "tool"]


def offered_tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Offered function tools by name: agents only call tools the request actually offers."""
    tools = body.get("tools") or []
    return {t["function"]["name"]: t["function"] for t in tools if t.get("type", "function") == "function"}


def next_call(messages: list[dict[str, Any]], name: str, arguments: dict[str, Any]) -> ScriptedToolCall:
    """A tool call whose id continues the numbering of the calls already in the conversation."""
    earlier = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
    return ScriptedToolCall(id=f"call_{earlier + 1}", name=name, arguments=arguments)


# Section headings of the agents' answers, in English and Chinese: every heading follows the locale.
SECTIONS = {
    "problem": ("Problem Statement", "问题陈述"), "findings": ("Findings", "发现"),
    "conclusion": ("Conclusion", "结论"), "references": ("References", "参考资料"),
    "analysis": ("Analysis", "分析"), "statistics": ("Statistical Summary", "统计汇总"),
    "interpretation": ("Interpretation", "解读"), "result": ("Result", "结果"),
}


def heading(key: str, zh: bool) -> str:
    """A section heading (``## Findings`` / ``## 发现``) in the answer's language."""
    return "## " + SECTIONS[key][1 if zh else 0]


def any_section(text: str, key: str) -> str:
    """A section's body, whichever language its heading is in."""
    return next((found for name in SECTIONS[key] if (found := section(text, name, "##"))), "")


def section(text: str, heading: str, level: str = "#") -> str:
    """The body under a markdown heading, up to the next heading of the same level."""
    pattern = rf"(?m)^{re.escape(level)} {re.escape(heading)}[ \t]*\n(.*?)(?=^{re.escape(level)} |\Z)"
    match = re.search(pattern, text, re.DOTALL)
    return match.group(1).strip() if match else ""


def plain(text: str) -> str:
    """Markdown inline syntax removed, so a sentence can be quoted in a bullet or table."""
    text = LINK_RE.sub(r"\1", text)
    text = re.sub(r"[*_`]+", "", text)
    return re.sub(r"\s+", " ", text).strip()


# A full stop after these does not end a sentence ("Dr. Smith", "e.g. solar").
ABBREVIATION_RE = re.compile(r"(?:\b(?:Dr|Mr|Mrs|Ms|Prof|St|Sr|Jr|vs|etc|No|Fig|Inc|Ltd|approx|e\.g|i\.e)|"
                             r"\b[A-Z])\.$")
SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def sentences(text: str) -> list[str]:
    """The prose of ``text`` as whole sentences: headings, tables, rules, tags and ``Source:`` lines
    dropped, so no markdown heading leaks into a finding and no abbreviation splits a sentence."""
    prose = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "|", "---", "<", "```", "Source: ")):
            continue
        prose.append(plain(re.sub(r"^([-*+]|\d+\.)\s+", "", line)))
    found: list[str] = []
    for line in prose:
        pieces = [piece.strip() for piece in SENTENCE_END_RE.split(line) if piece.strip()]
        merged: list[str] = []
        for piece in pieces:
            if merged and ABBREVIATION_RE.search(merged[-1]):
                merged[-1] += " " + piece
            else:
                merged.append(piece)
        found.extend(merged)
    return found


def first_sentence(text: str) -> str:
    """The first whole sentence of the prose in ``text`` (headings, tables and rules skipped)."""
    found = sentences(text)
    return found[0] if found else ""


def shorten(text: str, limit: int) -> str:
    """Whitespace-collapsed text cut at a word boundary, so titles and bullets stay readable."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(",;:") + "…"


def locale_of(messages: list[dict[str, Any]], fallback_text: str = "") -> str:
    """The prompt's ``Locale:`` marker; without one, guess from the text like the coordinator."""
    match = LOCALE_RE.search(system_text(messages))
    if match:
        return match.group(1)
    return "zh-CN" if is_chinese(fallback_text) else "en-US"


def mid_sentence(subject: str) -> str:
    """The subject inside a sentence: lower-case first letter unless it starts an acronym."""
    return subject if subject[1:2].isupper() else subject[:1].lower() + subject[1:]


def key_point(observation: str) -> str:
    """An observation's most telling sentence: its conclusion if it has one, else its first."""
    for key in ("findings", "analysis", "interpretation", "conclusion", "result"):
        body = BULLET_TITLE_RE.sub("", any_section(observation, key))
        found = first_sentence(body)
        if found:
            return found
    return first_sentence(observation)
