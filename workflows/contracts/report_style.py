"""The report's styles, apart from the pydantic contracts (workflows/contracts/research.py), so that the command
line's ``--help`` lists them without importing pydantic."""

from __future__ import annotations

from enum import StrEnum


class ReportStyle(StrEnum):
    ACADEMIC = "academic"
    POPULAR_SCIENCE = "popular_science"
    NEWS = "news"
    SOCIAL_MEDIA = "social_media"
    STRATEGIC_INVESTMENT = "strategic_investment"
