"""Renders search and crawl results as the text the model reads (pure, workflow-safe)."""

from __future__ import annotations

import json

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.tool_activities import CrawlResult, SearchResponse


def search_results_json(response: SearchResponse) -> str:
    """DeerFlow hands search results to the model as a JSON list of title, url and content."""
    return json.dumps(
        [{"title": r.title, "url": r.url, "content": r.content} for r in response.results],
        ensure_ascii=False,
    )


def format_search_response(response: SearchResponse) -> str:
    if not response.results:
        return f"No results found for {response.query!r}."
    return search_results_json(response)


def format_crawl_result(result: CrawlResult) -> str:
    header = f"# {result.title}\n\nSource: {result.url}\n\n" if result.title else f"Source: {result.url}\n\n"
    note = "\n\n[content truncated]" if result.truncated else ""
    return f"{header}{result.markdown}{note}"
