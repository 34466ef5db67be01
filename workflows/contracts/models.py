"""The shared data contracts of deerflow-temporal.

Every value that crosses a boundary (client -> workflow, workflow -> activity, workflow -> client)
is one of these pydantic v2 models, so the pydantic data converter can check it on both sides.
Activities import from here; this module imports nothing of theirs, which keeps the workflow
sandbox free of I/O libraries.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field, computed_field, field_validator, model_validator

from workflows.contracts.base import Contract
from workflows.contracts.budget import BudgetStanding, BudgetTimeoutAction, ReportReserve, RunBudget, standing
from workflows.contracts.decisions import Decision
from workflows.contracts.fork_point import ForkPoint
from workflows.contracts.mcp_choices import IgnoredMCPServer, MCPServerChoice
from workflows.contracts.report_style import ReportStyle
from workflows.contracts.usage import Usage
from workflows.text.untrusted_text import without_lone_surrogates

TASK_QUEUE = "deep-research"
WORKFLOW_TYPE = "DeepResearchWorkflow"
# The names of the workflow's query and updates (workflows/research/workflow.py declares its handlers with them,
# the clarification update with ``Awaiting.CLARIFICATION``), so that a client sends them without
# importing the workflow's code (runtime/research_client.py).
STATUS_QUERY = "status"
CHECKPOINT_QUERY = "checkpoint"  # the whole RunState, which a fork of the run reuses (workflows/research/fork.py)
REVIEW_PLAN_UPDATE = "review_plan"
DECIDE_BUDGET_UPDATE = "decide_budget"


class StepType(StrEnum):
    """What kind of worker a plan step needs."""

    RESEARCH = "research"  # researcher: search, crawl, local documents, MCP tools
    PROCESSING = "processing"  # coder: python_repl_tool
    ANALYSIS = "analysis"  # analyst: reasoning over earlier findings, no tools


class ReviewTimeoutAction(StrEnum):
    ACCEPT = "accept"
    CANCEL = "cancel"
    REPORT = "report"


class Step(Contract):
    """One unit of work in a plan; ``execution_res`` is filled in when the step has run."""

    need_search: bool = False
    title: str
    description: str = ""
    step_type: StepType = StepType.RESEARCH
    execution_res: str | None = None
    # Indexes (from 0) of earlier steps this one needs; used when the run has parallel_steps.
    depends_on: list[int] | None = None

    @field_validator("step_type", mode="before")
    @classmethod
    def _lenient_step_type(cls, value: Any) -> Any:
        # Models write "Research" or "processing " often enough that refusing them would lose good plans.
        if isinstance(value, str):
            return value.strip().lower()
        return value


class Plan(Contract):
    """The planner's output, in DeerFlow's schema."""

    locale: str = "en-US"
    has_enough_context: bool = False
    thought: str = ""
    title: str
    steps: list[Step] = Field(default_factory=list)


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


# ---------------------------------------------------------------- chat messages and tools


class ToolCall(Contract):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Set when the model sent arguments that are not a JSON object; the agent loop answers
    # the call with an error message instead of running the tool.
    invalid_arguments: str | None = None


class ChatMessage(Contract):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    name: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class ToolSpec(Contract):
    """What the model sees of a tool: OpenAI function-calling shape."""

    name: str
    description: str
    parameters: dict[str, Any]


class ModelTier(StrEnum):
    BASIC = "basic"
    REASONING = "reasoning"


class ChatRequest(Contract):
    """Input of the ``chat`` activity.

    The system prompt is named, not inlined: the activity renders ``prompts/<prompt>.md`` with
    ``prompt_vars``. That keeps long prompt text out of workflow history and keeps the
    templates editable without a workflow change.
    """

    prompt: str
    prompt_vars: dict[str, str] = Field(default_factory=dict)
    messages: list[ChatMessage] = Field(default_factory=list)
    tools: list[ToolSpec] = Field(default_factory=list)
    model_tier: ModelTier = ModelTier.BASIC
    json_mode: bool = False
    # A named JSON schema the reply must follow (with json_mode): the activity sends it as
    # ``response_format: json_schema`` where the provider takes it. Named, so history stays small.
    response_schema: Literal["plan"] | None = None
    # JSON tool mode: what a ``url`` argument may be, the newest URLs the step found that no call has
    # used yet (workflows/research/found_urls.py); the model's own words never make one.
    url_choices: list[str] = Field(default_factory=list)


class ChatResponse(Contract):
    message: ChatMessage
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None  # the provider's: "stop", "tool_calls", "length", …
    # The reply stopped at ``output_cap`` (finish_reason "length"): kept, and handled by the caller.
    truncated: bool = False
    output_cap: int | None = None  # the max_tokens sent


# ---------------------------------------------------------------- tool activities


class SearchRequest(Contract):
    query: str
    max_results: int = 3


class SearchResult(Contract):
    title: str
    url: str
    content: str
    raw_content: str | None = None
    score: float | None = None
    published_date: str | None = None

    @field_validator("title", "url", "content", "raw_content", "published_date")
    @classmethod
    def _carriable(cls, value: str | None) -> str | None:
        """A provider's "\\ud800" escape is a lone surrogate, which no payload can carry (the search
        failed on every retry): it reads as U+FFFD (issue #42 §2)."""
        return None if value is None else without_lone_surrogates(value)


class SearchResponse(Contract):
    query: str
    results: list[SearchResult] = Field(default_factory=list)


class LocalSearchRequest(Contract):
    """Input of ``local_search_tool``: search only within the run's ``resources``."""

    query: str
    resources: list[str] = Field(default_factory=list)
    max_results: int = 3


class MCPListRequest(Contract):
    """List one operator server's tools for ``agent`` (none if the operator did not add it there)."""

    server_name: str
    agent: str
    enabled_tools: list[str] | None = None  # the request's narrowing, if any


class MCPToolList(Contract):
    server_name: str
    tools: list[ToolSpec] = Field(default_factory=list)


class MCPCallRequest(Contract):
    server_name: str
    tool: str
    enabled_tools: list[str] | None = None  # the request's narrowing, if any
    arguments: dict[str, Any] = Field(default_factory=dict)


class MCPCallResult(Contract):
    content: str
    is_error: bool = False


class CrawlRequest(Contract):
    url: str


class CrawlResult(Contract):
    url: str  # the final URL, after redirects
    title: str | None = None
    markdown: str
    truncated: bool = False


class PythonRequest(Contract):
    code: str
    timeout_seconds: float = 30.0


class PythonResult(Contract):
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    # Set when the sandbox stopped the code: "timeout", "memory", "cpu", "output".
    stopped: str | None = None
    duration_seconds: float = 0.0


class RunConfig(Contract):
    """Worker-side settings the workflow needs, read once per run through an activity.

    Reading them through an activity records them in history, so replay sees the same values
    even if the worker's environment has changed since.
    """

    agent_recursion_limit: int = 25
    offline_demo: bool = False  # the bundled offline model serves the run
    offline_search: bool = False  # the bundled search corpus serves its searches
    search_attributes_enabled: bool = False  # the namespace has our custom search attributes
    # Continue as new once a run's history has this many events (None: only when the server
    # suggests it). Lets operators keep histories short, and tests exercise the hand-over.
    continue_as_new_after_events: int | None = None
    # Tool calls run per model turn (the rest are answered "dropped"), and activities a run keeps
    # in flight at once. None (runs recorded before these limits existed): no limit, as then.
    max_tool_calls_per_turn: int | None = None
    max_activities_in_flight: int | None = None
    # Kinds of work this run schedules on its main queue rather than their own, because the worker
    # that read this config serves them beside the workflow: the server then dispatches each call
    # eagerly to the worker that asked for it. Empty (and in runs recorded before it): own queues.
    main_queue_kinds: list[Literal["model", "tools"]] = Field(default_factory=list)
    # LLM_TOOL_MODE of the worker that read this config (issue #24); None: runs from before it.
    llm_tool_mode: Literal["native", "json", "auto"] | None = None
    token_budget_default: int | None = None  # the operator's per-run token budget (None: none)
    token_budget_max: int | None = None  # and the most a request or a raise may have
    cost_budget_usd_default: float | None = None  # the same in USD, at the operator's model prices
    cost_budget_usd_max: float | None = None
    report_reserve: ReportReserve | None = None  # kept free for the report (None: runs from before it)


# ---------------------------------------------------------------- status query


class Phase(StrEnum):
    STARTING = "starting"
    COORDINATING = "coordinating"
    BACKGROUND_INVESTIGATION = "background_investigation"
    PLANNING = "planning"
    AWAITING_CLARIFICATION = "awaiting_clarification"
    AWAITING_REVIEW = "awaiting_review"
    AWAITING_BUDGET = "awaiting_budget"
    RESEARCHING = "researching"
    REPORTING = "reporting"
    COMPLETED = "completed"
    FAILED = "failed"


class Awaiting(StrEnum):
    """What a paused run needs from a person; each value is also the signal (and update) to send."""

    PLAN_FEEDBACK = "plan_feedback"
    CLARIFICATION = "clarification_answer"
    BUDGET = "budget"


class StepState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


class StepStatus(Contract):
    index: int
    title: str
    step_type: StepType
    state: StepState
    started_at: str | None = None
    finished_at: str | None = None
    finding_preview: str | None = None


class ProgressEvent(Contract):
    """One line of a run's story, for live views; ``at`` is workflow time (ISO 8601)."""

    at: str
    # "ignored": a signal the run dropped (bad or ill-timed), so its sender can see why.
    # "note": something a reader must know about the outcome (RunStatus.notes).
    kind: Literal["phase", "plan", "step_started", "step_done", "review", "clarification", "error", "ignored",
                  "note", "cancel", "budget"]
    message: str
    step_index: int | None = None


class PlanVersion(Contract):
    """A plan the planner wrote, and the feedback that led to it (None for the first)."""

    version: int
    plan: Plan
    feedback: str | None = None
    review: Decision | None = None  # the person's verdict on this version, once given


MAX_EVENTS = 200
# Of those, at most this many "ignored" events: a flood of bad signals cannot push out the run's story.
MAX_IGNORED_EVENTS = 10


class RunProgress(Contract):
    """What a run records as it goes: its phase, its waits, its story, its steps' progress, its
    usage and its ending. Kept in ``RunState.status``; the ``status`` query adds what the rest of the
    state already holds (the plan, its count, the locale, the offline providers) to make a
    ``RunStatus``, so nothing is kept twice."""

    phase: Phase
    awaiting: Awaiting | None = None  # what a person must send next
    awaiting_since: str | None = None
    review_deadline: str | None = None
    question: str | None = None  # the clarifying question, while one is pending
    plan_history: list[PlanVersion] = Field(default_factory=list)
    clarification_rounds: int = 0
    started_at: str | None = None
    events: list[ProgressEvent] = Field(default_factory=list)
    steps: list[StepStatus] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    error: str | None = None
    outcome: Outcome | None = None  # set when the run ends
    notes: list[str] = Field(default_factory=list)  # as ``ResearchResult.notes``, while the run goes on
    budget: RunBudget | None = None  # None until the research starts
    decisions: list[Decision] = Field(default_factory=list)  # who decided what, in order
    forked_from: ForkPoint | None = None  # the run this one is a fork of, and where


class RunStatus(RunProgress):
    """The ``status`` query's answer, built from the run's state (workflows/research/run_state.py)."""

    plan: Plan | None = None
    plan_iterations: int = 0
    locale: str | None = None
    # A bundled offline provider serves the run: which ones in ``offline_providers`` ("model",
    # "search"). Runs from before the list existed set only ``offline_demo``, meaning both.
    offline_demo: bool = False
    offline_providers: list[Literal["model", "search"]] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def budget_standing(self) -> BudgetStanding | None:
        """Spent and remaining, tokens and USD (computed when read: never out of step)."""
        return standing(self.budget, self.usage)


class ReviewOutcome(Contract):
    """What the ``review_plan`` update returns."""

    accepted: bool
    message: str

