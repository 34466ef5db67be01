"""Counters for the tools a run calls, the sandbox's outcomes and the bytes crawled.

Why an interceptor for tools: every tool is an activity, so counting at the one door they all pass
through covers tools added later too, with no line in each. Labels are the activity type (ours)
and an outcome from our own result fields; for MCP, the server's name only when the operator's
table has it. Nothing a page, a model or a server wrote becomes a label.

The counters go through the SDK's ``activity.metric_meter()``, which is a no-op unless the worker
opened a metrics endpoint (runtime/metrics.py).
"""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from config.settings import Settings
from workflows.contracts.tool_activities import MCPCallRequest, PythonResult

TOOLS = frozenset({"web_search", "crawl_tool", "python_repl_tool", "local_search_tool", "mcp_call_tool"})


class ToolMetricsInterceptor(Interceptor):
    """Register on the worker; ``settings`` says which MCP server names are the operator's."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CountingInbound(next, self.settings)


class _CountingInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, settings: Settings) -> None:
        super().__init__(next)
        self.settings = settings

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        if name not in TOOLS:
            return await super().execute_activity(input)
        meter = activity.metric_meter()
        calls = meter.create_counter("deerflow_tool_calls", "Tool calls (activity attempts), by tool and outcome")
        tool = self._tool_label(name, input.args)
        try:
            result = await super().execute_activity(input)
        except BaseException:
            calls.add(1, {"tool": tool, "outcome": "error"})
            if name == "python_repl_tool":
                _count_sandbox_run("refused")
            raise
        calls.add(1, {"tool": tool, "outcome": "ok"})
        if isinstance(result, PythonResult):
            _count_sandbox_run(result.stopped or ("ok" if result.exit_code == 0 else "error"))
        return result

    def _tool_label(self, name: str, args: Any) -> str:
        """``mcp:<server>`` for an operator's MCP server, else the activity's name."""
        request = args[0] if args else None
        if isinstance(request, MCPCallRequest) and request.server_name in self.settings.mcp_servers:
            return f"mcp:{request.server_name}"
        return name


def _count_sandbox_run(outcome: str) -> None:
    activity.metric_meter().create_counter(
        "deerflow_sandbox_runs", "Sandboxed Python runs, by outcome: ok, error (non-zero exit), "
        "timeout, memory, cpu, output (stopped by the sandbox), refused (not run)").add(1, {"outcome": outcome})


def count_crawl_bytes(size: int) -> None:
    """Add the decoded body size of one fetched page or PDF to the crawl-bytes counter."""
    activity.metric_meter().create_counter("deerflow_crawl_bytes", "Bytes of pages and PDFs fetched (decoded)",
                                           "By").add(size)
