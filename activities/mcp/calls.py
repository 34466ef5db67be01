"""The MCP activities, ``mcp_list_tools`` and ``mcp_call_tool``, as the worker registers them.

They do their work in ``activities/mcp/tools.py`` (which says how and why), imported on first
use: the MCP SDK takes seconds to import, and most runs use no MCP server (``activities/support/lazy.py``).
"""

from __future__ import annotations

from temporalio import activity

from activities.guards.secret_scrubber import SecretScrubber
from activities.support.lazy import MCP_MODULE, load
from activities.support.retry_pacing import paced_retries
from config.settings import Settings
from runtime.heartbeat import heartbeating
from workflows.contracts.tool_activities import MCPCallRequest, MCPCallResult, MCPListRequest, MCPToolList


class McpActivities:
    """Built with the worker's settings: the operator's server table and guards, and the secrets
    to keep out of what a server's stderr puts in the log."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.scrubber = SecretScrubber.for_settings(settings)

    @activity.defn(name="mcp_list_tools")
    @heartbeating
    @paced_retries
    async def mcp_list_tools(self, request: MCPListRequest) -> MCPToolList:
        """The server's tools for ``request.agent``, as ToolSpecs named ``mcp_<server>_<tool>``."""
        mcp_tools = await load(MCP_MODULE)
        return await mcp_tools.list_tools(request, self.settings, self.scrubber)

    @activity.defn(name="mcp_call_tool")
    @heartbeating
    async def mcp_call_tool(self, request: MCPCallRequest) -> MCPCallResult:
        """Call one tool; the server's tool errors come back as ``is_error``."""
        mcp_tools = await load(MCP_MODULE)
        return await mcp_tools.call_tool(request, self.settings, self.scrubber)
