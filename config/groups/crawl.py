"""The crawler: the hosts its address guard admits, the page cap and the extraction children."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from config.groups.base import SettingsGroup, comma_separated


class CrawlSettings(SettingsGroup):
    """``crawl_tool``'s guard and caps (activities/web/)."""

    # Crawl guard: hosts (or IPs) that may be fetched even though they are not public.
    crawl_allow_hosts: list[str] = Field(default_factory=list, alias="DEERFLOW_CRAWL_ALLOW_HOSTS")
    """Comma-separated hosts/IPs the crawler may fetch although they are not public."""
    crawl_max_chars: int = Field(default=20_000, alias="DEERFLOW_CRAWL_MAX_CHARS")
    """Crawled markdown is capped to this before it enters history."""
    # Page and PDF extraction runs in child processes (activities/support/isolated.py): how many at once
    # per worker, and each one's address-space limit. Each is also killed at its time budget.
    extract_max_concurrency: int = Field(default=8, ge=1, alias="DEERFLOW_EXTRACT_MAX_CONCURRENCY")
    """Page/PDF extraction child processes per worker."""
    extract_max_memory_mb: int = Field(default=1024, ge=256, alias="DEERFLOW_EXTRACT_MAX_MEMORY_MB")
    """Each extraction child's address-space limit."""

    @field_validator("crawl_allow_hosts", mode="before")
    @classmethod
    def _split_crawl_hosts(cls, value: Any) -> Any:
        return comma_separated(value, lambda host: host.lower())
