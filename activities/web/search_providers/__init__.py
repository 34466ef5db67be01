"""The bundled search providers; importing this package registers each under its ``SEARCH_API`` name.

One module per provider keeps each one small and lets a provider's client library (``ddgs``,
``arxiv``) load only with this package, never with the workflow code.
"""

from __future__ import annotations

from activities.web.search_providers import arxiv_search, brave, duckduckgo, searx, serper, tavily, wikipedia

__all__ = ["arxiv_search", "brave", "duckduckgo", "searx", "serper", "tavily", "wikipedia"]
