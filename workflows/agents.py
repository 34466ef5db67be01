"""The agents of the step loop, as data.

The researcher, the coder and the analyst differ only in their prompt and their tools (DeerFlow's
``create_agent`` factory idea), so each is a record, and one agent loop runs them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.models import ModelTier, StepType


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

RESEARCHER_TOOL_GUIDANCE = (
    "- `web_search`: search the web; returns titles, URLs and snippets.\n"
    "- `crawl_tool`: read one page in full, as markdown."
)
