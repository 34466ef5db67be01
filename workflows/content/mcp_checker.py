"""``McpServerCheckWorkflow``: DeerFlow's "add MCP server" check, for a server the operator configured.

Only a name travels (``MCPListRequest``): the ``mcp_list_tools`` activity looks the definition up
in the operator's table, exactly as a research run's listing does, so no request can make a
worker start a program or reach an address. A server that cannot be listed fails the run with
the reason, which the API server shows.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import MCP_LIST_TOOLS, execute
    from workflows.calls.errors import failure_message
    from workflows.calls.inputs import decode_input
    from workflows.calls.queues import OWN_QUEUES
    from workflows.contracts.tool_activities import MCPListRequest, MCPToolList

MCP_CHECK_WORKFLOW = "McpServerCheckWorkflow"


@workflow.defn(name=MCP_CHECK_WORKFLOW)
class McpServerCheckWorkflow:
    @workflow.run
    async def run(self, raw: RawValue) -> MCPToolList:
        request = decode_input(raw, MCPListRequest, workflow.payload_converter())
        try:
            return await execute(MCP_LIST_TOOLS, request, MCPToolList, routing=OWN_QUEUES)
        except ActivityError as error:
            raise ApplicationError(f"MCP server {request.server_name} could not be listed: "
                                   f"{failure_message(error)}", type="McpUnavailable", non_retryable=True) from None
