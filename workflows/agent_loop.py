"""The agent loop shared by the researcher, the coder and the analyst.

One model turn is one activity; the tool calls of a turn run as concurrent activities; their
results go back as tool messages. The loop stops at a final answer, or at the recursion limit,
where one tool-less turn asks the model to conclude from what it has.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.agents import AgentSpec
    from workflows.model_calls import call_model
    from workflows.models import ChatMessage, ChatRequest, ToolSpec, Usage
    from workflows.tools import ToolContext, run_tool_call, tool_specs

FINAL_ANSWER_REQUEST = (
    "You have reached the limit of tool calls for this step. Do not call any more tools. "
    "Write your final answer now, from the information gathered so far, and say what is missing."
)


async def run_agent(
    agent: AgentSpec,
    prompt_vars: dict[str, str],
    task: str,
    recursion_limit: int,
    tool_context: ToolContext,
    usage: Usage,
    extra_tools: list[ToolSpec] | None = None,
) -> str:
    """Run ``agent`` on ``task`` until it answers; returns the answer's markdown.

    ``extra_tools`` are tools found at run time (MCP), routed through ``tool_context``.
    """
    messages = [ChatMessage(role="user", content=task)]
    specs = tool_specs(agent.tools) + (extra_tools or [])
    for _ in range(recursion_limit):
        reply = await call_model(
            ChatRequest(prompt=agent.prompt, prompt_vars=prompt_vars, messages=messages, tools=specs,
                        model_tier=agent.model_tier),
            usage,
        )
        messages.append(reply)
        if not reply.tool_calls:
            return reply.content
        outputs = await asyncio.gather(
            *(run_tool_call(call, agent.tools, tool_context) for call in reply.tool_calls)
        )
        messages.extend(
            ChatMessage(role="tool", content=output, tool_call_id=call.id, name=call.name)
            for call, output in zip(reply.tool_calls, outputs, strict=True)
        )
    messages.append(ChatMessage(role="user", content=FINAL_ANSWER_REQUEST))
    final = await call_model(
        ChatRequest(prompt=agent.prompt, prompt_vars=prompt_vars, messages=messages,
                    model_tier=agent.model_tier),
        usage,
    )
    return final.content
