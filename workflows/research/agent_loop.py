"""The agent loop shared by the researcher, the coder and the analyst.

One model turn is one activity; the tool calls of a turn run as concurrent activities; their
results go back as tool messages. The loop stops at a final answer, or at the recursion limit,
where one tool-less turn asks the model to conclude from what it has.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_slots import ActivitySlots
    from workflows.calls.model_calls import call_model
    from workflows.calls.side_by_side import together
    from workflows.contracts.chat import ChatMessage, ChatRequest, ToolCall, ToolSpec
    from workflows.contracts.usage import UsageSink
    from workflows.research.agents import AgentSpec
    from workflows.research.tools import ToolContext, run_tool_call, tool_specs

FINAL_ANSWER_REQUEST = (
    "You have reached the limit of tool calls for this step. Do not call any more tools. "
    "Write your final answer now, from the information gathered so far, and say what is missing."
)


# Runs recorded before it answered each dropped call with its own tool message: a reply with
# thousands of calls then put thousands of messages into every later turn of the step, whose
# preparation (trimming, the client's request encoding) blocked the worker's event loop long enough
# under load to miss heartbeats, so the turn was retried for ever. Now the dropped calls leave the
# conversation and one notice says so: a turn's size is bounded by the cap, not by the model.
BOUNDED_DROPS_PATCH = "bounded-dropped-calls"


def dropped_call_message(made: int, cap: int) -> str:
    return (f"Error: not run. Your reply made {made} tool calls; at most {cap} run per turn (the first {cap} "
            "ran). Make fewer calls at a time.")


def dropped_calls_notice(made: int, cap: int) -> str:
    return (f"Your last reply made {made} tool calls; at most {cap} run per turn, so only the first {cap} ran "
            f"and the other {made - cap} were not run (they are left out above). Make fewer calls at a time.")


def answered(reply: ChatMessage, ran: list[ToolCall], outputs: list[str]) -> list[ChatMessage]:
    """``reply`` as the conversation keeps it, then its calls' answers: each call that ran, its output;
    the calls past the per-turn cap left out, and one notice saying so (in runs recorded before
    ``BOUNDED_DROPS_PATCH``: kept, each answered as not run)."""
    calls, made, notice = reply.tool_calls, len(reply.tool_calls), None
    if dropped := made - len(ran):
        workflow.logger.warning("Model made %d tool calls in one turn; ran the first %d", made, len(ran))
        if workflow.patched(BOUNDED_DROPS_PATCH):
            reply = reply.model_copy(update={"tool_calls": ran})
            calls, notice = ran, dropped_calls_notice(made, len(ran))
        else:
            outputs = outputs + [dropped_call_message(made, len(ran))] * dropped
    answers = [ChatMessage(role="tool", content=output, tool_call_id=call.id, name=call.name)
               for call, output in zip(calls, outputs, strict=True)]
    return [reply, *answers, *([ChatMessage(role="user", content=notice)] if notice is not None else [])]


async def run_agent(
    agent: AgentSpec,
    prompt_vars: dict[str, str],
    task: str,
    recursion_limit: int,
    tool_context: ToolContext,
    usage: UsageSink,
    extra_tools: list[ToolSpec] | None = None,
    slots: ActivitySlots | None = None,
    max_tool_calls: int | None = None,
) -> str:
    """Run ``agent`` on ``task`` until it answers; returns the answer's markdown.

    ``extra_tools`` are tools found at run time (MCP), routed through ``tool_context``. Each model turn and tool
    call holds one of the run's ``slots``; of one turn's tool calls only the first ``max_tool_calls`` run (None:
    all), and the model is told that the others were dropped. Each turn's timeline line names the agent, the step
    and the turn; turns and tool calls go where ``tool_context.routing`` sends them, tools run are noted in ``ran``.
    """
    slots = slots or ActivitySlots(None)
    step = f" · step {tool_context.step_number}" if tool_context.step_number is not None else ""

    async def turn(request: ChatRequest, number: int) -> ChatMessage:
        async with slots.held():
            return await call_model(request, usage, summary=f"{agent.name}{step} · turn {number}",
                                    routing=tool_context.routing)

    async def tool(call: ToolCall) -> str:
        tool_context.ran.append(call.name)
        async with slots.held():
            return await run_tool_call(call, agent.tools, tool_context)

    messages = [ChatMessage(role="user", content=task)]
    specs = tool_specs(agent.tools) + (extra_tools or [])
    for number in range(1, recursion_limit + 1):
        reply = await turn(ChatRequest(prompt=agent.prompt, prompt_vars=prompt_vars, messages=messages, tools=specs,
                                       model_tier=agent.model_tier, url_choices=tool_context.found.choices(messages)),
                           number)
        messages.append(reply)
        if not reply.tool_calls:
            return reply.content
        ran = reply.tool_calls[:max_tool_calls]  # [:None] is every call
        messages[-1:] = answered(reply, ran, list(await together(*(tool(call) for call in ran))))
    messages.append(ChatMessage(role="user", content=FINAL_ANSWER_REQUEST))
    final = await turn(ChatRequest(prompt=agent.prompt, prompt_vars=prompt_vars, messages=messages,
                                   model_tier=agent.model_tier), recursion_limit + 1)
    return final.content
