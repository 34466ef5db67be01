"""Every activity the worker registers, by queue (the tests register the same lists).

The main queue keeps python_repl_tool for runs recorded before the sandbox queue existed
(workflows/queues.py): on a worker that cannot contain the code, it refuses them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.crawl import crawl_tool
from activities.llm import chat
from activities.mcp_tools import mcp_call_tool, mcp_list_tools
from activities.retrieval import local_search_tool
from activities.run_config import load_run_config
from activities.search import web_search
from sandbox.activity import python_repl_tool

ACTIVITIES: list[Callable[..., Any]] = [
    chat, web_search, crawl_tool, python_repl_tool, local_search_tool, mcp_list_tools, mcp_call_tool,
    load_run_config,
]

# The sandbox queue's worker: model-written code only, nothing that needs a key.
SANDBOX_ACTIVITIES: list[Callable[..., Any]] = [python_repl_tool]
