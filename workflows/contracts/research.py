"""``DeepResearchWorkflow``'s contract with its clients: its names (task queue, type, query and updates),
the request that starts a run, the answer to a plan review, and the result a run ends with.

Every value that crosses a boundary is a pydantic v2 model, so the pydantic data converter checks it on
both sides; these modules import nothing of the workflows' logic or of the activities, which keeps the
workflow sandbox free of I/O libraries and a client's imports small."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field, computed_field, field_validator, model_validator

from workflows.contracts.base import Contract
from workflows.contracts.budget import BudgetStanding, BudgetTimeoutAction, RunBudget, standing
from workflows.contracts.decisions import Decision
from workflows.contracts.fork_point import ForkPoint
from workflows.contracts.mcp_choices import IgnoredMCPServer, MCPServerChoice
from workflows.contracts.plan import Plan
from workflows.contracts.report_style import ReportStyle
from workflows.contracts.usage import Usage

TASK_QUEUE = "deep-research"
WORKFLOW_TYPE = "DeepResearchWorkflow"
# The names of the workflow's query and updates (workflows/research/workflow.py declares its handlers with them,
# the clarification update with ``Awaiting.CLARIFICATION``), so that a client sends them without
# importing the workflow's code (runtime/research_client.py).
STATUS_QUERY = "status"
CHECKPOINT_QUERY = "checkpoint"  # the whole RunState, which a fork of the run reuses (workflows/research/fork.py)
REVIEW_PLAN_UPDATE = "review_plan"
DECIDE_BUDGET_UPDATE = "decide_budget"


class ReviewTimeoutAction(StrEnum):
    ACCEPT = "accept"
    CANCEL = "cancel"
    REPORT = "report"


MCP_SETTINGS_REMOVED = (
    "'mcp_settings' is no longer accepted: MCP servers are defined by the worker's operator "
    "(MCP_SERVERS in conf.yaml). Pick them by name with 'mcp_servers', e.g. "
    '["github"] or [{"name": "github", "enabled_tools": ["search_code"]}].'
)


CHECKPOINT_REFUSED = (
    "'checkpoint' cannot be set by a client: a run's continuation state is written by the workflow "
    "itself when it continues as new."
)
# Fields earlier versions accepted in a request, and why they are refused now.
RETIRED_REQUEST_FIELDS = {
    # Server definitions let whoever starts a run choose what the worker executes and where its
    # credentials go.
    "mcp_settings": MCP_SETTINGS_REMOVED,
    # Continuation state from outside could override the worker's limits and skip plan review.
    "checkpoint": CHECKPOINT_REFUSED,
}


class ResearchRequest(Contract):
    """Workflow input. Only ``question`` is required; the rest has DeerFlow's defaults."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _refuse_retired_fields(cls, data: Any) -> Any:
        # Older clients serialise every field, so they send these as null: harmless, and dropped.
        # A value is refused with a message saying why and what to use instead.
        if isinstance(data, dict) and RETIRED_REQUEST_FIELDS.keys() & data.keys():
            for name, refusal in RETIRED_REQUEST_FIELDS.items():
                if data.get(name) is not None:
                    raise ValueError(refusal)
            data = {key: value for key, value in data.items() if key not in RETIRED_REQUEST_FIELDS}
        return data

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        # Whitespace asks nothing; the coordinator would take it for small talk and answer it.
        if not value.strip():
            raise ValueError("the question is blank")
        return value

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _names_as_choices(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("mcp_servers")
    @classmethod
    def _one_choice_per_server(cls, value: list[MCPServerChoice]) -> list[MCPServerChoice]:
        names = [choice.name for choice in value]
        if len(set(names)) != len(names):
            raise ValueError("each MCP server may be named once in 'mcp_servers'")
        return value

    question: str = Field(min_length=1)
    locale: str | None = None  # None: detected by the coordinator from the question
    auto_accept_plan: bool = False
    max_plan_iterations: int = Field(default=1, ge=1, le=20)
    max_step_num: int = Field(default=3, ge=1, le=20)
    max_search_results: int = Field(default=3, ge=1, le=20)
    enable_background_investigation: bool = True
    # False: nothing leaves for the web (DeerFlow's local-only mode). No background investigation,
    # and the researcher has no web_search or crawl_tool: only the user's documents and MCP tools.
    enable_web_search: bool = True
    enable_deep_thinking: bool = False
    report_style: ReportStyle = ReportStyle.ACADEMIC
    resources: list[str] = Field(default_factory=list)
    # MCP servers to use, by operator-defined name: "github" or {"name", "enabled_tools"}.
    mcp_servers: list[MCPServerChoice] = Field(default_factory=list, max_length=20)
    # Servers the front door refused (DeerFlow's UI sends its own list): noted in the run's status.
    ignored_mcp_servers: list[IgnoredMCPServer] = Field(default_factory=list, max_length=20)
    # How long a plan review (or a clarification question) may wait for a person, and what
    # happens then: accept the plan, cancel the run, or write the report from what is known.
    review_timeout: timedelta = Field(default=timedelta(days=7), gt=timedelta(0))
    review_timeout_action: ReviewTimeoutAction = ReviewTimeoutAction.CANCEL
    enable_clarification: bool = False
    max_clarification_rounds: int = Field(default=3, ge=1, le=10)
    # Beyond DeerFlow: run independent research steps concurrently (off for DeerFlow parity).
    parallel_steps: bool = False
    # Tokens and USD (the operator's prices) the run may spend, finite, never above the operator's maximum.
    token_budget: int | None = Field(default=None, ge=1)
    cost_budget_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    budget_timeout_action: BudgetTimeoutAction = BudgetTimeoutAction.FINISH  # after review_timeout
    # A fork of another run: where it starts; what it reuses is read from that run (workflows/research/fork.py).
    forked_from: ForkPoint | None = None


class Outcome(StrEnum):
    """How a run ended, so scripts need not parse the report to find out."""

    REPORT = "report"  # a research report was written
    DIRECT_REPLY = "direct_reply"  # the coordinator answered without research
    FAILED = "failed"  # the run could not produce a report (see ``error``)
    CANCELLED = "cancelled"  # nobody reviewed the plan in time (review_timeout_action=cancel)


class ResearchResult(Contract):
    report: str
    plan: Plan | None = None
    locale: str = "en-US"
    usage: Usage = Field(default_factory=Usage)
    outcome: Outcome = Outcome.REPORT
    error: str | None = None
    # What a reader must know about how the outcome came about, one line each: a direct reply, no
    # research needed, a report from zero findings, a report cut at the output cap.
    notes: list[str] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)  # who reviewed, answered, cancelled
    budget: RunBudget | None = None  # the token and cost budget, where the run had one

    @computed_field  # type: ignore[prop-decorator]
    @property
    def budget_standing(self) -> BudgetStanding | None:
        """Spent and remaining, tokens and USD (computed when read: never out of step)."""
        return standing(self.budget, self.usage)


class ReviewOutcome(Contract):
    """What the ``review_plan`` update returns."""

    accepted: bool
    message: str
