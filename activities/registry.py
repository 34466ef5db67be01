"""Every activity the worker registers, by queue, bound to the objects that hold their settings.

The worker, the tests, the history recorder and the benchmarks all build their workers from
these two functions, so a new activity is registered in one place. The main queue keeps
python_repl_tool for runs recorded before the sandbox queue existed (workflows/queues.py): on a
worker that cannot contain the code, it refuses them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.crawl import CrawlActivities
from activities.llm import ModelActivities
from activities.mcp_activities import McpActivities
from activities.retrieval import RetrievalActivities
from activities.run_config import RunConfigActivities
from activities.search import SearchActivities
from config.settings import Settings
from sandbox.activity import SandboxActivities


def activities_for(
    settings: Settings, *, search_attributes_enabled: bool = False, sandbox: SandboxActivities | None = None
) -> list[Callable[..., Any]]:
    """The main queue's activities. ``sandbox``: the worker's one sandbox (probed once), if it has one."""
    mcp = McpActivities(settings)
    return [
        ModelActivities(settings).chat,
        SearchActivities(settings).web_search,
        CrawlActivities(settings).crawl_tool,
        (sandbox or SandboxActivities(settings)).python_repl_tool,
        RetrievalActivities(settings).local_search_tool,
        mcp.mcp_list_tools,
        mcp.mcp_call_tool,
        RunConfigActivities(settings, search_attributes_enabled).load_run_config,
    ]


def sandbox_activities_for(sandbox: SandboxActivities) -> list[Callable[..., Any]]:
    """The sandbox queue's worker: model-written code only, nothing that needs a key."""
    return [sandbox.python_repl_tool]
