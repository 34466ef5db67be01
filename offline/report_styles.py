"""The offline reporter's five report styles: each has its own structure and voice.

DeerFlow's styles (academic, popular science, news, social media, strategic investment) are
written for different readers, so a style that only swapped a tagline would show a new user
nothing. Here each style orders and names its sections for its reader: a paper's key points and
summary table, a science writer's short answer and "why it matters", a news lede and open
questions, a numbered thread with tags, an investor's executive summary and risk table. Every
style keeps every observation (no finding is lost) and ends with the Key Citations DeerFlow's
prompt asks for. Headings follow the report's locale (English or Chinese).

Pure functions over :class:`ReportParts`; ``offline.scripted_agents.reporter`` gathers the parts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# Words that mark a sentence as a risk or limitation, for the investor's risk table.
RISK_RE = re.compile(r"\b(risk|but|however|challenge|limit|problem|cannot|costly|expensive|falls|harm)"
                     r"|风险|但|挑战|问题", re.IGNORECASE)

HEADINGS = {
    "points": ("Key Points", "要点"), "overview": ("Overview", "概述"),
    "analysis": ("Detailed Analysis", "详细分析"), "table": ("Summary Table", "汇总表"),
    "citations": ("Key Citations", "主要引用"), "finding": ("Finding", "发现"), "sources": ("Sources", "来源数"),
    "short": ("The Short Answer", "简短回答"), "story": ("How It Works", "来龙去脉"),
    "matters": ("Why It Matters", "为什么重要"), "known": ("What We Know", "已知情况"),
    "unclear": ("What Remains Unclear", "尚待明确"), "thread": ("Thread", "帖子"),
    "details": ("The Details", "详细内容"), "summary": ("Executive Summary", "执行摘要"),
    "risks": ("Opportunities and Risks", "机会与风险"), "kind": ("Kind", "类型"),
    "opportunity": ("Opportunity", "机会"), "risk": ("Risk", "风险"), "bottom": ("Bottom Line", "结论"),
}


@dataclass(frozen=True)
class ReportParts:
    """What every style is built from; ``sections`` are (heading, observation with demoted headings)."""

    title: str
    thought: str
    points: list[str]  # one whole sentence per finding, repeats removed
    sections: list[tuple[str, str]]
    rows: list[tuple[str, int]]  # (key point, number of distinct sources) per observation
    links: dict[str, str]  # url -> title, in order of first citation
    zh: bool

    def h(self, key: str) -> str:
        return HEADINGS[key][1 if self.zh else 0]

    def say(self, english: str, chinese: str) -> str:
        return chinese if self.zh else english

    @property
    def nothing_found(self) -> str | None:
        """The honest statement for a subject the offline corpus does not cover (no source cited)."""
        if self.links:
            return None
        return self.say(f'The offline corpus has nothing on "{self.title}": no source could be cited, so this '
                        "report has no sourced findings. Set TAVILY_API_KEY for real search.",
                        f"离线语料库中没有关于“{self.title}”的资料：没有可引用的来源，因此本报告没有有据可查的发现。"
                        "设置 TAVILY_API_KEY 才能进行真实搜索。")


def _bullets(items: list[str], numbered: bool = False) -> list[str]:
    return [f"{i}. {item}" if numbered else f"- {item}" for i, item in enumerate(items, 1)]


def _sections(parts: ReportParts, numbered: bool = True) -> list[str]:
    lines: list[str] = []
    for i, (title, body) in enumerate(parts.sections, 1):
        lines += [f"### {i}. {title}" if numbered else f"### {title}", "", body, ""]
    return lines


def _citations(parts: ReportParts) -> list[str]:
    listed = "\n\n".join(f"- [{text}]({url})" for url, text in parts.links.items())
    none = parts.say("None: no source was cited.", "无：没有引用任何来源。")
    return [f"## {parts.h('citations')}", "", listed or none]


def _points(parts: ReportParts) -> list[str]:
    return parts.points or [parts.nothing_found or parts.say("No findings were available.", "没有可用的发现。")]


def academic(parts: ReportParts) -> list[str]:
    """A paper's order and a neutral, third-person voice, with a summary table of the findings."""
    scope = parts.say(f"This report examines {len(parts.sections)} research step(s), drawing on "
                      f"{len(parts.links)} distinct source(s).",
                      f"本报告考察了 {len(parts.sections)} 个研究步骤，引用 {len(parts.links)} 个不同来源。")
    lines = [f"## {parts.h('points')}", "", *_bullets(_points(parts)), "", f"## {parts.h('overview')}", "",
             parts.say(" ", "").join(x for x in (scope, parts.nothing_found or "", parts.thought) if x), "",
             f"## {parts.h('analysis')}", "", *_sections(parts)]
    if parts.rows:
        lines += [f"### {parts.h('table')}", "", f"| # | {parts.h('finding')} | {parts.h('sources')} |",
                  "|---|---|---|"]
        lines += [f"| {i} | {point.replace('|', '/')} | {count} |" for i, (point, count) in enumerate(parts.rows, 1)]
        lines.append("")
    return lines


def popular_science(parts: ReportParts) -> list[str]:
    """A science writer's order: the short answer first, told to the reader, then how and why."""
    short = parts.nothing_found or parts.say(" ", "").join(parts.points[:2])
    hook = parts.say("Here is what the evidence says, in plain words.", "下面用通俗的话说说证据告诉我们什么。")
    matters = parts.say("Each point above comes from the sources listed below, so you can read further "
                        "and check it yourself.", "上面的每一点都来自下列来源，你可以继续阅读并自行核实。")
    return [hook, "", f"## {parts.h('short')}", "", short, "", f"## {parts.h('points')}", "",
            *_bullets(_points(parts)), "", f"## {parts.h('story')}", "", *_sections(parts, numbered=False),
            f"## {parts.h('matters')}", "", matters, ""]


def news(parts: ReportParts) -> list[str]:
    """Inverted pyramid: a one-paragraph lede, then what is known, then what is not."""
    lede = parts.nothing_found or parts.say(f"**In brief:** {parts.points[0]}" if parts.points else "",
                                            f"**简讯：**{parts.points[0]}" if parts.points else "")
    gaps = [title for title, body in parts.sections if not re.search(r"\]\(https?://", body)]
    unclear = (_bullets(gaps) if gaps else
               [parts.say("The sources gathered agree on the points above; none reported conflicting figures.",
                          "已收集的来源在上述要点上一致，没有相互矛盾的数据。")])
    return [lede, "", f"## {parts.h('points')}", "", *_bullets(_points(parts)), "", f"## {parts.h('known')}", "",
            *_sections(parts, numbered=False), f"## {parts.h('unclear')}", "", *unclear, ""]


def social_media(parts: ReportParts) -> list[str]:
    """A numbered thread of short posts with tags, the full notes below it."""
    posts = [f"{i}/ {point}" for i, point in enumerate(_points(parts), 1)]
    words = re.findall(r"[A-Za-z][A-Za-z-]{4,}", parts.title)
    tags = " ".join(f"#{w.replace('-', '')}" for w in dict.fromkeys(words[:4])) or "#DeerFlow"
    return [f"## {parts.h('thread')}", "", *posts, "", tags, "", f"## {parts.h('details')}", "",
            *_sections(parts, numbered=False)]


def strategic_investment(parts: ReportParts) -> list[str]:
    """An investor's briefing: executive summary, the findings, a risk table and the bottom line."""
    summary = parts.nothing_found or parts.say(" ", "").join(parts.points[:2])
    sourced = list(dict.fromkeys(point for point, sources in parts.rows if sources))  # not the statistics
    risks = [p for p in sourced if RISK_RE.search(p)]
    upside = [p for p in sourced if p not in risks]
    table = [f"| {parts.h('kind')} | {parts.h('finding')} |", "|---|---|"]
    table += [f"| {parts.h('opportunity')} | {p.replace('|', '/')} |" for p in upside]
    table += [f"| {parts.h('risk')} | {p.replace('|', '/')} |" for p in risks]
    bottom = parts.say(f"{len(upside)} finding(s) point to opportunities and {len(risks)} to risks; weigh them "
                       "against the sources before committing capital.",
                       f"{len(upside)} 条发现指向机会，{len(risks)} 条指向风险；投入资金前请对照来源加以权衡。")
    return [f"## {parts.h('summary')}", "", summary, "", f"## {parts.h('points')}", "", *_bullets(_points(parts)),
            "", f"## {parts.h('analysis')}", "", *_sections(parts), f"## {parts.h('risks')}", "", *table, "",
            f"## {parts.h('bottom')}", "", bottom, ""]


STYLES: dict[str, Callable[[ReportParts], list[str]]] = {
    "academic": academic, "popular_science": popular_science, "news": news, "social_media": social_media,
    "strategic_investment": strategic_investment,
}


def render_report(style: str, parts: ReportParts) -> str:
    """The whole report in ``style`` (unknown styles read as academic), ending with its citations."""
    body = STYLES.get(style, academic)(parts)
    return "\n".join([f"# {parts.title}", "", *body, *_citations(parts)]).rstrip() + "\n"
