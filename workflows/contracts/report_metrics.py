"""DeerFlow's automated report metrics and its score formula, as pure code.

Pure (no I/O, no clock) and linear in the report's length: the report is whatever a request
sent, and the ``measure_report`` activity computes its metrics (runs recorded before that did so
in the workflow). The section patterns, style requirements, word targets and weights are
DeerFlow's (``src/eval/metrics.py``, ``src/eval/evaluator.py``), so a report scores here what it
scores there. Where DeerFlow's pattern backtracks (``技术.*(?:分析|…)`` retries from every "技术"
of a line, its link patterns from every "["), the pattern here finds the same thing in one pass:
an atomic group tries only the first "技术" of each line, and links are scanned
(workflows/text/markdown_links.py).
"""

from __future__ import annotations

import re
from urllib.parse import urlparse

from pydantic import Field

from workflows.contracts.base import Contract
from workflows.text.markdown_links import links

_BASE_SECTIONS = ("title", "key_points", "overview", "detailed_analysis", "key_citations")
STYLE_SECTIONS: dict[str, tuple[str, ...]] = {
    "default": _BASE_SECTIONS,
    "academic": ("title", "key_points", "overview", "detailed_analysis", "literature_review", "methodology",
                 "key_citations"),
    "news": _BASE_SECTIONS,
    "popular_science": _BASE_SECTIONS,
    "social_media": ("title", "key_points", "overview", "key_citations"),
    "strategic_investment": ("title", "key_points", "overview", "detailed_analysis", "executive_summary",
                             "market_analysis", "technology_analysis", "investment_recommendations",
                             "key_citations"),
}
SECTION_PATTERNS = {
    "title": r"^#\s+.+",
    "key_points": r"(?:key\s*points|要点|关键发现|核心观点)",
    "overview": r"(?:overview|概述|简介|背景)",
    "detailed_analysis": r"(?:detailed\s*analysis|详细分析|深度分析|分析)",
    "key_citations": r"(?:key\s*citations|references|参考文献|引用|来源)",
    "literature_review": r"(?:literature\s*review|文献综述|研究回顾)",
    "methodology": r"(?:methodology|方法论|研究方法)",
    "executive_summary": r"(?:executive\s*summary|执行摘要|投资建议)",
    "market_analysis": r"(?:market\s*analysis|市场分析|产业分析)",
    # DeerFlow's r"(?:technology|技术.*(?:分析|解析|深度))" and r"(?:investment.*recommend|投资建议|投资评级)":
    # a line holds a match from one of its "技术" (or "investment") iff it holds one from its first.
    "technology_analysis": r"(?:technology|^(?>[^\n]*?技术)[^\n]*?(?:分析|解析|深度))",
    "investment_recommendations": r"(?:^(?>[^\n]*?investment)[^\n]*?recommend|投资建议|投资评级)",
}
WORD_TARGETS = {
    "strategic_investment": (10000, 15000), "academic": (3000, 8000), "news": (800, 2000),
    "popular_science": (1500, 4000), "social_media": (500, 1500), "default": (1000, 5000),
}
GRADES = ((9.0, "A+"), (8.5, "A"), (8.0, "A-"), (7.5, "B+"), (7.0, "B"), (6.5, "B-"), (6.0, "C+"),
          (5.5, "C"), (5.0, "C-"), (4.0, "D"))


class ReportMetrics(Contract):
    """DeerFlow's ``metrics`` object, field for field."""

    word_count: int = 0
    citation_count: int = 0
    unique_sources: int = 0
    image_count: int = 0
    section_count: int = 0
    section_coverage_score: float = 0.0
    sections_found: list[str] = Field(default_factory=list)
    sections_missing: list[str] = Field(default_factory=list)
    has_title: bool = False
    has_key_points: bool = False
    has_overview: bool = False
    has_citations_section: bool = False


def _domains(text: str) -> set[str]:
    domains = set()
    for rest in set(re.findall(r"https?://([^\s\)\]]+)", text)):  # each URL parsed once
        try:
            domain = (urlparse(f"http://{rest}").netloc or rest.split("/")[0]).lower().replace("www.", "")
        except ValueError:  # DeerFlow skips what urlparse refuses (a bad IPv6 literal)
            continue
        if domain:
            domains.add(domain)
    return domains


def compute_metrics(report: str, style: str) -> ReportMetrics:
    """The metrics of ``report`` for ``style`` (an unknown style is judged as DeerFlow's default)."""
    required = STYLE_SECTIONS.get(style, STYLE_SECTIONS["default"])
    lower = report.lower()
    found: dict[str, bool] = {}
    for section in required:
        pattern = SECTION_PATTERNS[section]
        found[section] = bool(re.search(pattern, report, re.MULTILINE) if section == "title"
                              else re.search(pattern, lower, re.IGNORECASE | re.MULTILINE))
    present = [s for s, ok in found.items() if ok]
    return ReportMetrics(
        word_count=len(re.findall(r"\b[a-zA-Z]+\b", report)) + len(re.findall(r"[\u4e00-\u9fff]", report)),
        citation_count=sum(1 for _ in links(report, "[", "web")),  # DeerFlow's r"\[[^\]]*\]\(https?://[^\s\)]+\)"
        unique_sources=len(_domains(report)),
        image_count=sum(1 for _ in links(report, "![", "nonempty")),  # DeerFlow's r"!\[[^\]]*\]\([^)]+\)"
        section_count=len(present),
        section_coverage_score=len(present) / len(found) if found else 0.0,
        sections_found=present,
        sections_missing=[s for s, ok in found.items() if not ok],
        has_title=found.get("title", False), has_key_points=found.get("key_points", False),
        has_overview=found.get("overview", False), has_citations_section=found.get("key_citations", False),
    )


def metrics_score(metrics: ReportMetrics, style: str) -> float:
    """0-10: sections 30 %, citations 25 %, word count 20 %, source diversity 15 %, images 10 %."""
    low, high = WORD_TARGETS.get(style, WORD_TARGETS["default"])
    words = metrics.word_count
    if low <= words <= high:
        word_score = 10.0
    elif words < low:
        word_score = words / low * 8
    else:
        word_score = max(10 - (words / high - 1) * 5, 5)
    score = (metrics.section_coverage_score * 10 * 0.30 + min(metrics.citation_count / 10, 1.0) * 10 * 0.25
             + word_score * 0.20 + min(metrics.unique_sources / 5, 1.0) * 10 * 0.15
             + min(metrics.image_count / 3, 1.0) * 10 * 0.10)
    return round(score, 2)


def grade(score: float) -> str:
    return next((letter for floor, letter in GRADES if score >= floor), "F")
