"""The agents of the step loop, as data.

The researcher, the coder and the analyst differ only in their prompt and their tools (DeerFlow's
``create_agent`` factory idea), so each is a record, and one agent loop runs them all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.chat import ModelTier
    from workflows.contracts.plan import StepType


@dataclass(frozen=True)
class AgentSpec:
    name: str
    prompt: str  # template name under prompts/
    tools: tuple[str, ...]
    model_tier: ModelTier = ModelTier.BASIC


RESEARCHER = AgentSpec(name="researcher", prompt="researcher", tools=("web_search", "crawl_tool"))
CODER = AgentSpec(name="coder", prompt="coder", tools=("python_repl_tool",))
ANALYST = AgentSpec(name="analyst", prompt="analyst", tools=())

AGENT_FOR_STEP: dict[StepType, AgentSpec] = {
    StepType.RESEARCH: RESEARCHER,
    StepType.PROCESSING: CODER,
    StepType.ANALYSIS: ANALYST,
}

WEB_TOOL_GUIDANCE = (
    "- `web_search`: search the web; returns titles, URLs and snippets.\n"
    "- `crawl_tool`: read one page in full, as markdown."
)
LOCAL_TOOL_GUIDANCE = (
    "- `local_search_tool`: search the user's own documents. They are the most relevant sources: "
    "use this tool FIRST, and turn to the web only for what the documents do not cover.\n"
)
LOCAL_ONLY_GUIDANCE = (
    "- `local_search_tool`: search the user's own documents, your only sources: web search is off "
    "for this research."
)
NO_WEB_GUIDANCE = (
    "Web search is off for this research and no documents were given: work from what you know, "
    "and say plainly which statements you could not check against a source."
)


def agent_for(step_type: StepType, has_resources: bool, web: bool = True) -> tuple[AgentSpec, str]:
    """The agent for a step, and the tool guidance for its prompt.

    With resources, the researcher gets ``local_search_tool`` first in its tools, as DeerFlow does.
    Without ``web`` (the request's ``enable_web_search``), it loses ``web_search`` and
    ``crawl_tool``, as DeerFlow's researcher does; the tool dispatcher refuses any tool not offered,
    so a model that calls them anyway reaches nothing.
    """
    agent = AGENT_FOR_STEP[step_type]
    if agent is not RESEARCHER:
        return agent, WEB_TOOL_GUIDANCE
    if not web:
        if has_resources:
            return replace(agent, tools=("local_search_tool",)), LOCAL_ONLY_GUIDANCE
        return replace(agent, tools=()), NO_WEB_GUIDANCE
    if has_resources:
        return replace(agent, tools=("local_search_tool", *agent.tools)), LOCAL_TOOL_GUIDANCE + WEB_TOOL_GUIDANCE
    return agent, WEB_TOOL_GUIDANCE
