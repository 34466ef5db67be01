"""Follows a research run as it happens: a live panel on a terminal, plain change lines elsewhere.

Why polling the ``status`` query: it is the one view of a run that exists on every deployment
(no extra services, nothing stored outside history), and the workflow keeps it small. A poll
every half second on loopback is cheap; a failed poll is treated as a blip (server restart,
network), shown as "reconnecting…", and retried with backoff, because a watch is often left
running for a long time and must outlive a restart of the very server it watches.

Each progress event carries its workflow time, so the watch measures how long after an event
it was on screen (``WatchStats``): that delay is what a person watching actually experiences.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.query.v1 import WorkflowQuery
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest, QueryWorkflowRequest
from temporalio.client import (
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError, RPCStatusCode

from cli.render import ended_label
from cli.terminal import printable, printable_model
from runtime.front_door import NO_WORKER_ADVICE, CliError
from runtime.retries import retries_of
from workflows.contracts.research import STATUS_QUERY
from workflows.contracts.status import Awaiting, Phase, ProgressEvent, RunStatus, StepState, StepStatus
from workflows.research.status_view import (
    STEP_MARK,
    Retry,
    awaiting_commands,
    awaiting_headline,
    budget_line,
    event_text,
    offline_label,
    phase_label,
    retry_line,
    spent_line,
    usage_line,
)

POLL_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 5.0
# A poll must not hang for the SDK's default (minutes) when the server is gone.
RPC_TIMEOUT = timedelta(seconds=5)
TERMINAL_PHASES = frozenset({Phase.COMPLETED, Phase.FAILED})
RECENT_EVENTS = 6
RECENT_FINDINGS = 3
MARKDOWN_MARKS = re.compile(r"[#*`>]+")  # a one-line preview reads better without markdown syntax

STEP_STYLE = {StepState.PENDING: "dim", StepState.RUNNING: "bold cyan", StepState.DONE: "green"}
PHASE_STYLE = {
    Phase.AWAITING_REVIEW: "bold black on yellow",
    Phase.AWAITING_CLARIFICATION: "bold black on yellow",
    Phase.AWAITING_BUDGET: "bold black on yellow",
    Phase.COMPLETED: "bold green",
    Phase.FAILED: "bold red",
}


class NoWorkerAnswer(Exception):
    """The server answered but the status query did not: usually no worker polls the task queue."""


# Exceptions a poll may raise that say nothing about the run itself: retried with backoff.
_TRANSIENT = (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError, TimeoutError, OSError, NoWorkerAnswer)


@dataclass
class WatchStats:
    """Display delay per progress event: when it was shown minus when the workflow recorded it.

    Only events that happened while the watch was running count; the backlog shown on attach
    says nothing about responsiveness.
    """

    latencies: list[float] = field(default_factory=list)

    def record(self, seconds: float) -> None:
        self.latencies.append(seconds)

    @property
    def count(self) -> int:
        return len(self.latencies)

    @property
    def median(self) -> float | None:
        return statistics.median(self.latencies) if self.latencies else None

    @property
    def max(self) -> float | None:
        return max(self.latencies) if self.latencies else None

    def summary(self) -> str:
        if not self.latencies:
            return "Display delay: no events measured."
        return (f"Display delay over {self.count} events: median {self.median:.2f} s, "
                f"max {self.max:.2f} s (event time in the workflow -> on screen).")


# ---------------------------------------------------------------- pure rendering


def parse_time(value: str) -> datetime:
    """Workflow timestamps are ISO 8601 with an offset; a naive one is taken as UTC."""
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def clock_time(value: str) -> str:
    """HH:MM:SS in the viewer's local time zone."""
    return parse_time(value).astimezone().strftime("%H:%M:%S")


def format_duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def event_line(event: ProgressEvent) -> str:
    return f"[{clock_time(event.at)}] {event_text(event)}"


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _step_elapsed(step: StepStatus, now: datetime) -> str:
    if step.started_at is None:
        return ""
    end = parse_time(step.finished_at) if step.finished_at else now
    return format_duration((end - parse_time(step.started_at)).total_seconds())


def _run_elapsed(status: RunStatus, now: datetime) -> str:
    if status.started_at is None:
        return "—"
    end = now
    if status.phase in TERMINAL_PHASES and status.events:
        end = parse_time(status.events[-1].at)  # a finished run's clock stops at its last event
    return format_duration((end - parse_time(status.started_at)).total_seconds())


def local_time(timestamp: str) -> str:
    return f"{parse_time(timestamp).astimezone():%Y-%m-%d %H:%M %Z}"


def _awaiting_block(status: RunStatus, run_id: str) -> RenderableType | None:
    headline = awaiting_headline(status, when=local_time)
    if headline is None:
        return None
    lines = Text()
    lines.append(f" ⏸ {headline} ", style="bold black on yellow")
    for command in awaiting_commands(status.awaiting, run_id):
        lines.append(f"\n   {command}", style="bold yellow")
    return lines


def _plan_table(status: RunStatus, now: datetime) -> RenderableType | None:
    """The plan's steps and their progress. While the plan awaits review it also shows what a
    reviewer needs (the planner's thought, the locale, each step's description), as the plain
    ``plan_text`` does: on a terminal this panel is the one copy of the plan on screen."""
    if status.plan is None:
        return None
    version = f"v{len(status.plan_history)} " if status.plan_history else ""
    title = Text(f"Plan {version}· {status.plan.title}", style="table.title")  # Text: never parsed as markup
    reviewing = status.awaiting is Awaiting.PLAN_FEEDBACK
    if reviewing:
        title.append(f"  (locale {status.plan.locale})", style="dim")
        if status.plan.thought:
            title.append(f"\nThought: {status.plan.thought}", style="dim")
    descriptions = {index: step.description for index, step in enumerate(status.plan.steps)} if reviewing else {}
    table = Table(title=title, title_justify="left", expand=True, show_edge=False, pad_edge=False)
    table.add_column("", width=1, no_wrap=True)
    table.add_column("#", justify="right", width=2, no_wrap=True)
    table.add_column("Step", ratio=1)
    table.add_column("Type", no_wrap=True)
    table.add_column("Time", justify="right", no_wrap=True)
    for step in status.steps:
        style = STEP_STYLE[step.state]
        cell = Text(step.title, style=style)
        if descriptions.get(step.index):
            cell.append(f"\n{descriptions[step.index]}", style="dim")
        table.add_row(Text(STEP_MARK[step.state], style=style), str(step.index + 1), cell,
                      step.step_type.value, _step_elapsed(step, now))
    return table


def render_status(status: RunStatus, run_id: str, now: datetime, *, note: str | None = None,
                  ended: tuple[str, str] | None = None, retries: Sequence[Retry] = ()) -> RenderableType:
    """The live panel for one status. Pure: same input, same output (``now`` drives the clocks).

    ``note`` is a transient remark for the subtitle, such as "reconnecting…". ``ended`` is how a run
    that did not complete ended, with its last phase: ("cancelled", "awaiting_review"). ``retries`` are
    the calls the server is retrying (``cli/retries.py``). Model-written text
    is made printable and reaches rich only as ``Text``, so its markup is shown, not obeyed.
    """
    status, run_id, note = printable_model(status), printable(run_id), note and printable(note)
    header = Table.grid(padding=(0, 2))
    header.add_column(style="dim", no_wrap=True)
    header.add_column()
    header.add_row("Run", Text(run_id, style="bold"))
    # assemble, not Text(style=...): a base style would paint the whole cell, not just the words
    phase = phase_label(status.phase)
    if ended is not None:
        header.add_row("Ended", Text.assemble((ended[0], "bold red")))
        phase = ended[1].replace("_", " ")
    header.add_row("Phase", Text.assemble((phase, PHASE_STYLE.get(status.phase, "bold"))))
    header.add_row("Elapsed", _run_elapsed(status, now))
    header.add_row("Usage", usage_line(status.usage) + (f"\nBudget: {budget_line(status)}" if status.budget else ""))
    parts: list[RenderableType] = [header]
    if status.error:
        parts.append(Text(f"Error: {status.error}", style="bold red"))
    parts.extend(Text(printable(retry_line(retry, status)), style="bold yellow") for retry in retries)
    awaiting = _awaiting_block(status, run_id)
    if awaiting is not None:
        parts += [Text(""), awaiting]
    table = _plan_table(status, now)
    if table is not None:
        parts += [Text(""), table]
    findings = [step for step in status.steps if step.state is StepState.DONE and step.finding_preview]
    if findings:
        block = Text()
        block.append("Latest findings", style="bold")
        for step in findings[-RECENT_FINDINGS:]:
            block.append(f"\n {step.index + 1}. ", style="bold green")
            block.append(_one_line(MARKDOWN_MARKS.sub("", step.finding_preview or ""), 160), )
        parts += [Text(""), block]
    if status.events:
        block = Text()
        block.append("Recent", style="bold")
        for event in status.events[-RECENT_EVENTS:]:
            block.append(f"\n {clock_time(event.at)} ", style="dim")
            block.append(_one_line(event_text(event), 110))
        parts += [Text(""), block]
    subtitle = note or offline_label(status)
    return Panel(Group(*parts), title=Text(f"DeerFlow research · {run_id}"), title_align="left",
                 subtitle=Text(subtitle, style="yellow") if subtitle else None, subtitle_align="right",
                 border_style="yellow" if note else "blue")


# ---------------------------------------------------------------- the poll loop


def _execution(handle: WorkflowHandle[Any, Any]) -> WorkflowExecution:
    return WorkflowExecution(workflow_id=handle.id, run_id=handle.run_id or "")


@dataclass(frozen=True)
class Described:
    """What one describe call says: whether the run still runs, and which of its calls are retried."""

    state: WorkflowExecutionStatus
    retries: list[Retry] = field(default_factory=list)


async def describe_state(handle: WorkflowHandle[Any, Any]) -> Described:
    """Whether the run is still running, and its calls being retried, in one attempt.

    Why not ``handle.describe()``: the SDK retries an unreachable server for about ten seconds
    and logs a warning per attempt, which would freeze the view and scribble over it. The watch
    has its own backoff, so its calls fail fast (``retry=False``) and stay quiet.
    """
    client = handle._client  # the handle's client; the SDK exposes no public accessor
    response = await client.workflow_service.describe_workflow_execution(
        DescribeWorkflowExecutionRequest(namespace=client.namespace, execution=_execution(handle)),
        retry=False, timeout=RPC_TIMEOUT,
    )
    return Described(WorkflowExecutionStatus(response.workflow_execution_info.status), retries_of(response))


async def query_status(handle: WorkflowHandle[Any, Any]) -> RunStatus:
    """The ``status`` query in one attempt (see ``describe_state`` for why not ``handle.query``)."""
    client = handle._client
    response = await client.workflow_service.query_workflow(
        QueryWorkflowRequest(namespace=client.namespace, execution=_execution(handle),
                             query=WorkflowQuery(query_type=STATUS_QUERY)),
        retry=False, timeout=RPC_TIMEOUT,
    )
    if response.HasField("query_rejected"):
        raise WorkflowQueryRejectedError(WorkflowExecutionStatus(response.query_rejected.status))
    # The handle's converter carries the workflow's serialization context, as handle.query would use
    # (codecs and external payload storage may depend on it).
    [status] = await handle._data_converter.decode(response.query_result.payloads, [RunStatus])
    return status


def _event_key(event: ProgressEvent) -> tuple[str, str, str, int | None]:
    return event.at, event.kind, event.message, event.step_index


class Watcher:
    """Follows one run; keeps what it has shown across ``follow`` calls (e.g. around a prompt)."""

    def __init__(self, *, live: bool, out: TextIO, stats: WatchStats | None = None,
                 poll_seconds: float = POLL_SECONDS, now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 describe: Callable[[WorkflowHandle[Any, Any]], Awaitable[Described]] = describe_state,
                 query: Callable[[WorkflowHandle[Any, Any]], Awaitable[RunStatus]] = query_status,
                 on_no_worker: Callable[[], Awaitable[None]] | None = None) -> None:
        self.live = live
        self.out = out
        self.stats = stats if stats is not None else WatchStats()
        self.poll_seconds = poll_seconds
        self.now = now
        self._describe = describe  # injectable, so tests can script a run without a server
        self._query = query
        # Called when no worker answers: the front door restarts its embedded worker if it died.
        self._on_no_worker = on_no_worker
        self.closed: WorkflowExecutionStatus | None = None  # set once the run has ended
        self.last: RunStatus | None = None
        self.retries: list[Retry] = []  # the calls being retried at the last poll
        self._shown_retries: set[tuple[str, int]] = set()
        self._seen: set[tuple[str, str, str, int | None]] = set()
        self._shown_awaiting: tuple[str, int] | None = None
        self._outage: str | None = None  # what the current outage was reported as
        self._since = now()
        self._console = Console(file=out, force_terminal=True) if live else None
        self._live: Live | None = None

    # ---- output

    def _write(self, line: str) -> None:
        line = printable(line)  # event messages and errors carry model-written text
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            self.out.write(line + "\n")
            self.out.flush()

    def _new_events(self, status: RunStatus) -> list[ProgressEvent]:
        fresh = [event for event in status.events if _event_key(event) not in self._seen]
        self._seen.update(_event_key(event) for event in fresh)
        return fresh

    def _measure(self, events: list[ProgressEvent]) -> None:
        shown = self.now()
        for event in events:
            at = parse_time(event.at)
            if at >= self._since:
                self.stats.record((shown - at).total_seconds())

    def _show(self, run_id: str, status: RunStatus, note: str | None = None) -> None:
        fresh = self._new_events(status)
        if self._live is not None:
            self._live.update(render_status(status, run_id, self.now(), note=note, retries=self.retries),
                              refresh=True)
        else:
            self._show_plain(run_id, status, fresh)
        self._measure(fresh)
        self.last = status

    def _show_plain(self, run_id: str, status: RunStatus, fresh: list[ProgressEvent]) -> None:
        if not status.events and (self.last is None or self.last.phase != status.phase):
            # A run from before progress events existed: fall back to phase changes.
            self._write(f"[{self.now().astimezone():%H:%M:%S}] phase → {status.phase.value}")
        for event in fresh:
            self._write(event_line(event))
        awaiting = (status.awaiting, len(status.plan_history)) if status.awaiting else None
        if awaiting is not None and awaiting != self._shown_awaiting:
            self._write(f"  {awaiting_headline(status, when=local_time)}")
            for command in awaiting_commands(status.awaiting, run_id):
                self._write(f"    {command}")
        self._shown_awaiting = awaiting
        for retry in self.retries:  # one line per new attempt
            if (retry.call, retry.attempt) not in self._shown_retries:
                self._shown_retries.add((retry.call, retry.attempt))
                self._write(f"[{self.now().astimezone():%H:%M:%S}] {retry_line(retry, status)}")

    def _reconnecting(self, run_id: str, error: BaseException) -> None:
        reason = _one_line(getattr(error, "message", None) or str(error) or type(error).__name__, 100)
        label = "waiting for a worker…" if isinstance(error, NoWorkerAnswer) else "reconnecting…"
        advice = f": {NO_WORKER_ADVICE}" if isinstance(error, NoWorkerAnswer) else ""
        if self._live is not None and self.last is not None:
            self._live.update(render_status(self.last, run_id, self.now(), note=f"{label} ({reason}){advice}"),
                              refresh=True)
        elif label != self._outage:  # plain output: one line per kind of outage, not one per retry
            self._write(f"[{self.now().astimezone():%H:%M:%S}] {label} ({reason}){advice}")
        self._outage = label

    # ---- polling

    async def _poll(self, handle: WorkflowHandle[Any, Any]) -> tuple[RunStatus | None, bool]:
        """One poll: (status or None if the query failed on a closed run, whether the run has closed)."""
        try:
            described = await self._describe(handle)
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                raise CliError(f"No research run with ID {handle.id!r}.") from error
            raise
        closed = described.state is not WorkflowExecutionStatus.RUNNING
        self.retries = [] if closed else described.retries
        if closed:
            self.closed = described.state
        try:
            status = await self._query(handle)
        except _TRANSIENT as error:
            if not closed:
                reason = getattr(error, "message", None) or str(error) or type(error).__name__
                raise NoWorkerAnswer(f"status query: {reason}") from error
            # A finished run is answered by replaying it on a worker; one retry covers a blip,
            # and with no worker left the last status shown stands.
            await asyncio.sleep(self.poll_seconds)
            try:
                status = await self._query(handle)
            except _TRANSIENT:
                return None, True
        return status, closed

    async def follow(self, handle: WorkflowHandle[Any, Any],
                     until: Callable[[RunStatus], bool] | None = None) -> RunStatus:
        """Poll until the run closes (or ``until(status)`` holds) and return the last status."""
        self._since = self.now()
        if self._console is not None:
            self._live = Live(console=self._console, auto_refresh=False, transient=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        failures = 0
        try:
            while True:
                try:
                    status, closed = await self._poll(handle)
                except _TRANSIENT as error:
                    failures += 1
                    self._reconnecting(handle.id, error)
                    if isinstance(error, NoWorkerAnswer) and self._on_no_worker is not None:
                        await self._on_no_worker()
                    await asyncio.sleep(min(MAX_BACKOFF_SECONDS, self.poll_seconds * 2 ** failures))
                    continue
                if self._outage is not None and self._live is None:
                    self._write(f"[{self.now().astimezone():%H:%M:%S}] reconnected")
                failures, self._outage = 0, None
                if status is not None:
                    self._show(handle.id, status)
                if closed:
                    return self._finish(handle.id)
                if status is not None and until is not None and until(status):
                    return status
                await asyncio.sleep(self.poll_seconds)
        finally:
            if self._live is not None:
                self._live.stop()
                self._live = None

    def _finish(self, run_id: str) -> RunStatus:
        status = self.last or RunStatus(phase=Phase.FAILED)
        closed = (ended_label(self.closed) or "completed") if self.closed else "closed"
        last_phase = status.phase.value
        if status.phase not in TERMINAL_PHASES:
            if self.closed is WorkflowExecutionStatus.COMPLETED:  # its final status could not be read
                status = status.model_copy(update={"phase": Phase.COMPLETED})
            else:  # terminated, cancelled or timed out: the workflow never got to say so itself
                status = status.model_copy(update={"phase": Phase.FAILED,
                                                   "error": status.error or f"the run was {closed}"})
        ended = ended_label(self.closed)
        if self._live is not None:
            shown = status.model_copy(update={"awaiting": None}) if ended else status
            self._live.update(render_status(shown, run_id, self.now(), ended=ended and (ended, last_phase)),
                              refresh=True)
        else:
            phase = f"last phase {last_phase}" if ended else status.phase.value
            self._write(f"[{self.now().astimezone():%H:%M:%S}] run {closed}: {phase}, {spent_line(status)}")
        self.last = status
        return status


async def watch(handle: WorkflowHandle[Any, Any], *, live: bool, out: TextIO = sys.stdout,
                stats: WatchStats | None = None, poll_seconds: float = POLL_SECONDS,
                on_no_worker: Callable[[], Awaitable[None]] | None = None) -> RunStatus:
    """Follow a run until it closes: a ``rich`` live panel when ``live``, else plain change lines.

    Pass ``stats`` to read the measured display delay afterwards (``stats.summary()``).
    """
    return await Watcher(live=live, out=out, stats=stats, poll_seconds=poll_seconds,
                         on_no_worker=on_no_worker).follow(handle)
