"""What ``starter.py inspect``, its ``--json`` and ``--html``, and the page's run timeline show of a run.

One Pydantic model is the contract of every view: the terminal, the self-contained HTML page and
the page's timeline (``GET /api/runs/ID/inspection``) render the same ``RunInspection``, and
``--json`` prints it. It is built from the run's history alone (runtime/inspection.py), so a
history file exported on one machine is inspected the same on another.

Every string in it comes from the run: model replies, pages, search results, people's messages.
Each view treats them as untrusted text (never markup, never terminal controls), and the builder's
caller removes the operator's secrets from the whole model before anyone sees it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

PartFormat = Literal["text", "markdown", "json", "code"]
CallState = Literal["completed", "failed", "timed_out", "cancelled", "running", "scheduled"]


class Part(BaseModel):
    """One readable piece of a call's input or output: a prompt message, a reply, a search result."""

    label: str  # "user", "reply", "tool call · web_search", "result 2 · <title>"
    text: str
    format: PartFormat = "text"


class AttemptFailure(BaseModel):
    """Why one attempt of a call failed. History keeps the failure of the attempt before the last
    (the retry's reason) and the last one's own; what the attempts before those raised is not kept."""

    attempt: int
    message: str


class CallUsage(BaseModel):
    """A model call's tokens and cost, as the chat activity priced them at the worker's prices."""

    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    priced: bool = False  # the model had a price: else the cost is unknown, not zero


class Call(BaseModel):
    """One activity: a model turn, a search, a crawl, a Python run, an MCP call, the run's config."""

    id: str  # "<run>.<scheduled event id>": unique across a continue-as-new chain
    event_id: int  # the ActivityTaskScheduled event, in its run's history
    activity: str  # the activity type: chat, web_search, crawl_tool, ...
    title: str  # the timeline line the workflow gave it ("planner · v1", "researcher · step 2 · turn 3")
    state: CallState
    scheduled_at: datetime
    started_at: datetime | None = None  # of the last attempt
    closed_at: datetime | None = None
    duration_seconds: float | None = None  # the last attempt's, start to close
    attempts: int = 0  # 0: not started yet
    failures: list[AttemptFailure] = Field(default_factory=list)
    worker: str | None = None  # the identity of the worker that ran the last attempt
    input: list[Part] = Field(default_factory=list)
    output: list[Part] = Field(default_factory=list)
    usage: CallUsage | None = None  # model calls only


class Message(BaseModel):
    """Something a person or a client sent the run: a review, an answer, a budget decision, a cancel."""

    at: datetime
    event_id: int
    run: int  # the run's position in its continue-as-new chain
    kind: str  # the signal's or update's name, "cancel request", "terminate"
    text: str
    by: str  # who, as the door that sent it vouches: "alice (api)", "temporal CLI or Web UI (temporal)"
    outcome: str | None = None  # an update's answer ("accepted", or the refusal)


class Wait(BaseModel):
    """A durable wait for a person (plan review, clarification, budget decision) and how it ended."""

    title: str  # "plan review", "clarification", "budget decision"
    started_at: datetime
    deadline: datetime
    ended_at: datetime | None = None
    ended: Literal["answered", "timed out", "waiting"] = "waiting"


class Stage(BaseModel):
    """A part of the run: the coordinator, the background investigation, a plan version, a plan
    review, one step, the reporter; its calls, its waits, and what people sent during it."""

    key: str  # "coordinator", "planner", "plan review", "step 2", "reporter", ...
    title: str  # "step 2 · researcher: Market size", ...
    started_at: datetime
    ended_at: datetime | None = None
    calls: list[Call] = Field(default_factory=list)
    waits: list[Wait] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def duration_seconds(self) -> float | None:
        return (self.ended_at - self.started_at).total_seconds() if self.ended_at else None


class ForkLink(BaseModel):
    """A run this one was forked from, or a fork of it, and at which stage ("step 2", "report")."""

    workflow_id: str
    at: str


class RunInspection(BaseModel):
    """A whole run, stage by stage, as its history records it."""

    workflow_id: str
    run_ids: list[str]  # the chain, first to last
    workflow_type: str
    source: str  # "server <address>" or "file <path>"
    status: str  # running, completed, failed, cancelled, terminated, timed out, continued as new
    started_at: datetime | None = None
    closed_at: datetime | None = None
    request: list[Part] = Field(default_factory=list)  # the start input
    result: list[Part] = Field(default_factory=list)  # the result, or the run's failure
    stages: list[Stage] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list)  # every message, in order (also under their stages)
    problems: list[str] = Field(default_factory=list)  # failed workflow tasks, payloads that could not be read
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_models: list[str] = Field(default_factory=list)
    # Where this run was forked from and its forks (issue #44 §2 fills these); shown by every view.
    forked_from: ForkLink | None = None
    forks: list[ForkLink] = Field(default_factory=list)

    @property
    def calls(self) -> list[Call]:
        return [call for stage in self.stages for call in stage.calls]
