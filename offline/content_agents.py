"""The offline model's answers for the content flows (report judge, prose writer, slide composer,
podcast script writer), as pure functions of the request's system and user text.

Like the research agents (offline/scripted_agents.py), each answer is built only from what was
sent, so the quickstart shows every button doing real work on the report in front of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from workflows.contracts.report_metrics import compute_metrics

_STYLE = re.compile(r"Report style:\s*([A-Za-z_]+)")


def report_judge(system: str, user: str) -> str:
    """Scores read off the report itself: sources and citations, sections, length."""
    report = user.partition("Report to evaluate:")[2]
    style = _STYLE.search(user)
    metrics = compute_metrics(report, style.group(1) if style else "default")
    cited = min(10, 3 + metrics.citation_count)
    covered = max(1, round(metrics.section_coverage_score * 10))
    length = min(10, 2 + metrics.word_count // 150)
    scores = {"factual_accuracy": cited, "completeness": covered, "coherence": 7 if metrics.has_title else 5,
              "relevance": 7, "citation_quality": min(10, 3 + metrics.unique_sources * 2), "writing_quality": length}
    strengths = [s for s, ok in (("Cites its sources inline", metrics.citation_count > 0),
                                 ("Opens with key points", metrics.has_key_points),
                                 ("Has a clear title", metrics.has_title)) if ok]
    weaknesses = [f"Missing sections: {', '.join(metrics.sections_missing)}"] if metrics.sections_missing else []
    if metrics.word_count < 300:
        weaknesses.append(f"Short: {metrics.word_count} words")
    return json.dumps({"scores": scores, "overall_score": round(sum(scores.values()) / len(scores)),
                       "strengths": strengths, "weaknesses": weaknesses,
                       "suggestions": ["Add the missing sections and more independent sources"]
                       if weaknesses else ["Add a figure or table to support the main finding"]})


_TASK = re.compile(r"^Task:\s*(\w+)", re.MULTILINE)
CONTINUATION = (" The evidence gathered so far points the same way, and the sections that follow look at it in "
                "more detail.")
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")


# A Markdown line's own marks (indentation, heading, list item, quote), kept as they are.
_LINE_MARK = re.compile(r"^\s*(?:(?:#{1,6}|[-*+]|\d{1,9}[.)]|>)[ \t]+)*")


def _line_by_line(text: str, change: Callable[[list[str]], str]) -> str:
    """``change`` applied to each line's sentences: its marks, blank lines and line breaks kept, so a
    list stays a list and a heading stays on its own line."""
    lines = []
    for line in text.split("\n"):
        mark = _LINE_MARK.match(line)
        body = line[mark.end():] if mark else line
        sentences = [s for s in _SENTENCE.split(" ".join(body.split())) if s]
        lines.append(f"{line[:len(line) - len(body)]}{change(sentences)}" if sentences else line)
    return "\n".join(lines)


def _shorter(sentences: list[str]) -> str:
    if len(sentences) == 1 and ", " in sentences[0]:  # one sentence: its last clause goes
        return sentences[0].rsplit(", ", 1)[0] + "."
    return " ".join(sentences[:max(1, len(sentences) // 2)])


def prose_writer(system: str, user: str) -> str:
    """Each option done plainly to the text, line by line: whole sentences kept, cut, repeated or tidied."""
    task = _TASK.search(system)
    option = task.group(1) if task else "improve"
    text, _, command = user.removeprefix("Text:\n").partition("\n\nCommand: ")
    text = text.strip()
    if option == "continue":  # the text before the cursor, headings and all: carry on after its last sentence
        return CONTINUATION
    if option == "shorter":
        return _line_by_line(text, _shorter)
    if option == "longer":
        sentences = [s for s in _SENTENCE.split(" ".join(text.split())) if s]
        return (f"{text}\n\nIn more detail: {' '.join(sentences)} "
                "Each of these points is developed in the sections below.")
    if option == "fix":
        return _line_by_line(text, lambda sentences: " ".join(s[:1].upper() + s[1:] for s in sentences))
    if option == "zap":
        return f"{text}\n\n(as asked: {command.strip()})"
    return _line_by_line(text, " ".join)


_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


def _plain(line: str) -> str:
    """A markdown line as plain text: links as their text, emphasis and list marks dropped."""
    return " ".join(_LINK.sub(r"\1", line).replace("**", "").replace("__", "").lstrip("-*+> ").split())


def _cells(line: str) -> list[str]:
    return [_plain(cell) for cell in line.strip().strip("|").split("|")]


def _report_sections(report: str) -> tuple[str, list[dict[str, object]]]:
    """The report's title and its ``##`` sections as slides: list items and first sentences as
    bullets, its first markdown table as the slide's table."""
    title, slides = "", []
    current: dict[str, object] | None = None
    for line in report.splitlines():
        stripped = line.strip()
        if stripped.startswith("# ") and not title:
            title = _plain(stripped[2:])
        elif stripped.startswith("## "):
            current = {"title": _plain(stripped[3:]), "bullets": []}
            slides.append(current)
        elif current is None or not stripped or stripped.startswith(("![", "#")):  # deeper headings: no bullets
            continue
        elif stripped.startswith("|"):
            cells = _cells(stripped)
            if all(set(cell) <= set("-: ") for cell in cells):
                continue
            table = current.setdefault("table", {"header": cells, "rows": []})
            if table is not None and table["header"] is not cells:  # type: ignore[index]
                table["rows"].append(cells)  # type: ignore[index]
        else:
            bullets = current["bullets"]
            text = _plain(stripped)
            if text and isinstance(bullets, list) and len(bullets) < 6:
                bullets.append(text if stripped[0] in "-*+" else _SENTENCE.split(text)[0])
    return title, [s for s in slides if s["bullets"] or s.get("table")]


def ppt_composer(system: str, user: str) -> str:
    """A deck that follows the report: its title, then one slide per section."""
    title, slides = _report_sections(user)
    return json.dumps({"title": title or "Research report", "subtitle": "Composed by the offline demo model",
                       "slides": slides}, ensure_ascii=False)


def podcast_script_writer(system: str, user: str) -> str:
    """Two hosts walk through the report's sections: he names each one, she gives its points."""
    title, sections = _report_sections(user)
    topic = (title or "a new report").rstrip(".")
    lines = [{"speaker": "male", "paragraph": f"Hello Deer! Welcome back. Today: {topic}"
              f"{'' if topic.endswith(('?', '!')) else '.'}"},
             {"speaker": "female", "paragraph": "Glad to be here. Let's go through what the research found."}]
    for section in sections[:8]:
        bullets = section["bullets"] if isinstance(section["bullets"], list) else []
        if not bullets:
            continue
        lines.append({"speaker": "male", "paragraph": f"So, {str(section['title']).lower()}. What stands out?"})
        lines.append({"speaker": "female", "paragraph": " ".join(str(b) for b in bullets[:2])})
    lines.append({"speaker": "male", "paragraph": "That's all for today. Thanks for listening to Hello Deer!"})
    return json.dumps({"locale": "zh" if re.search(r"[\u4e00-\u9fff]", user) else "en", "lines": lines},
                      ensure_ascii=False)
