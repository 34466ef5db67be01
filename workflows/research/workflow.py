"""``DeepResearchWorkflow``: DeerFlow's research pipeline as one durable, replayable workflow.

coordinator (⇄ clarification) -> background investigation -> planner <-> human review
-> step loop -> reporter

The workflow only decides; every model call, search, crawl and Python run is an activity. A
human review is a durable timer-bounded wait on a signal or update, so a run can sit paused for
days without holding worker memory, and survive worker and server restarts.

This module tells the story and takes people's messages; each stage is a module of its own
(coordination, planner, plan_review, step_loop, reporter), working on one ``ResearchRun``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence, Sized

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import CANCEL_ITSELF, execute
    from workflows.calls.errors import failure_message
    from workflows.contracts.chat import ChatMessage
    from workflows.contracts.decisions import OWN_CANCEL_PREFIX, actor_of_cancel
    from workflows.contracts.fork_point import ForkPoint, ForkStage
    from workflows.contracts.mcp_choices import ignored_mcp_note
    from workflows.contracts.research import (
        CHECKPOINT_QUERY,
        DECIDE_BUDGET_UPDATE,
        REVIEW_PLAN_UPDATE,
        STATUS_QUERY,
        WORKFLOW_TYPE,
        Outcome,
        ResearchResult,
        ReviewOutcome,
    )
    from workflows.contracts.status import Awaiting, Phase, RunStatus
    from workflows.research.budget import DECISION_SHAPE, parse_budget_decision
    from workflows.research.coordination import configure_and_coordinate, investigate
    from workflows.research.fork import seed_fork
    from workflows.research.plan_review import review
    from workflows.research.planner import usable_plan
    from workflows.research.reporter import write_report
    from workflows.research.research_run import ResearchRun, RunEnded
    from workflows.research.review import (
        Feedback,
        Inbox,
        InvalidFeedback,
        message_inputs,
        nonempty_answer,
        parse_feedback,
        refuse_undecodable,
    )
    from workflows.research.run_input import parse_inputs
    from workflows.research.run_metrics import count_end
    from workflows.research.run_state import RunState
    from workflows.research.status_view import why_cancelled
    from workflows.research.step_loop import run_steps

# A run that ends cancelled by its own decision (budget, review deadline) ends Cancelled on the server,
# as a cancel request ends it, instead of completing with the outcome "cancelled" (issue #49).
CANCELS_ITSELF_PATCH = "run-cancels-itself"
# A first plan that claims to need no research goes to the person's review like any other.
REVIEW_NO_RESEARCH_PATCH = "review-no-research"
NO_RESEARCH_NOTE = ("No research needed: the planner judged that it had enough context, so no "
                    "research step ran.")


@workflow.defn(dynamic=True)
class DeepResearchWorkflow:
    """Registered as the dynamic workflow so that its start inputs arrive undecoded, whatever
    their number (the SDK drops typed decoding when the count differs from the signature, and
    then a bad input fails the workflow task for ever). Only ``WORKFLOW_TYPE`` is served; the
    public contract is unchanged: one JSON object, a ``ResearchRequest``.

    Everything the run knows is one ``RunState`` (samples-python's ``safe_message_handlers``
    shape): stages read and change it, the ``status`` query shows a view of it, and
    continue-as-new copies it whole. What is on ``self`` besides is not state: messages waiting
    for the main method (only while the run awaits a person, so never at a continue-as-new).
    """

    def __init__(self) -> None:
        self._state = RunState()
        self._inbox = Inbox()
        self._cancelling_itself = False  # the cancel that comes is the run's own (its decision is recorded)

    # ------------------------------------------------------------------ the story of a run

    @workflow.run
    async def run(self, inputs: Sequence[RawValue]) -> ResearchResult:
        research, continued = self._accept(inputs)
        try:
            result = await self._research(research, continued)
            if result.outcome is Outcome.CANCELLED and workflow.patched(CANCELS_ITSELF_PATCH):
                await self._cancel_itself(research, result)
            return self._finish(result)
        except ActivityError as error:  # a call that failed for good (bad key, provider down past all retries)
            raise self._failed(error) from error
        except asyncio.CancelledError:
            self._record_cancel()
            raise

    async def _research(self, research: ResearchRun, continued: bool) -> ResearchResult:
        """The story of a run, to its result: a report, or how it ended early."""
        try:
            if continued:  # finish the steps the previous run had started, then go on as it would have
                await run_steps(research)
                await self._plan_review_and_research(research)
            elif research.request.forked_from is not None:
                await self._fork(research, research.request.forked_from)
            else:
                topic = await configure_and_coordinate(research)  # may end the run with a direct reply
                await investigate(research, topic)
                await self._plan_review_and_research(research)  # may end it: no usable plan, no review in time
            report = await write_report(research)
            return ResearchResult(report=report, plan=self._state.plan, locale=self._state.report_locale)
        except RunEnded as ended:
            return ended.result

    async def _cancel_itself(self, run: ResearchRun, result: ResearchResult) -> None:
        """End cancelled, as decided (a person's cancel at the budget, a decision not given in time):
        the server's cancel, asked for by an activity (activities/run_control.py), ends the run
        while it waits for that activity. Should the request fail for good, or the cancel never
        come, the run completes with the outcome ``cancelled`` as it did before."""
        status = self._state.status
        self._state.note(result.report)  # why: the status is what a cancelled run keeps
        status.outcome, status.awaiting = Outcome.CANCELLED, None
        self._cancelling_itself = True
        reason = OWN_CANCEL_PREFIX + (why_cancelled(self._state.view()) or result.report)
        try:
            await execute(CANCEL_ITSELF, reason, type(None), routing=run.routing)
        except ActivityError as error:
            workflow.logger.warning("The run could not cancel itself (%s); it completes as cancelled",
                                    failure_message(error))

    def _accept(self, inputs: Sequence[RawValue]) -> tuple[ResearchRun, bool]:
        """The run, and whether it continues another (whose state it then takes over).

        A bad input fails the run at once, with the reason in its status and its failure.
        """
        self._state.status.started_at = workflow.now().isoformat()
        info = workflow.info()
        try:
            if info.workflow_type != WORKFLOW_TYPE:
                raise ApplicationError(f"Unknown workflow type {info.workflow_type!r}: this worker runs "
                                       f"{WORKFLOW_TYPE}", type="UnknownWorkflowType", non_retryable=True)
            request, continuation = parse_inputs(inputs, workflow.payload_converter(), info.continued_run_id)
        except ApplicationError as error:
            workflow.logger.warning("Rejected the start input: %s", error.message)
            self._state.status.error = error.message
            self._state.enter(Phase.FAILED)
            raise
        if continuation is None:
            if request.ignored_mcp_servers:
                self._state.note(ignored_mcp_note(request.ignored_mcp_servers))
            return ResearchRun(request, self._state, self._inbox), False
        self._state = continuation.checkpoint
        self._state.record("phase", f"continued as a new run after {len(self._state.observations)} finding(s)")
        return ResearchRun(request, self._state, self._inbox), True

    async def _fork(self, run: ResearchRun, point: ForkPoint) -> None:
        """A fork: the source's results before ``point`` adopted, then on from there as the source went
        on (workflows/research/fork.py): plan again, or run the steps from N (then plan again while plans are
        left, as after any plan's steps), or only write the report."""
        feedback = await seed_fork(run, point)
        if point.stage is ForkStage.PLAN:
            await self._plan_review_and_research(run, feedback)
        elif point.stage is ForkStage.STEP:
            await run_steps(run)
            budget = run.state.status.budget
            if budget is None or not budget.cut_short:
                await self._plan_review_and_research(run)

    async def _plan_review_and_research(self, run: ResearchRun, feedback: str | None = None) -> None:
        """Plan, have the plan reviewed, run its steps; again until ``max_plan_iterations`` plans
        have run or the planner has enough context. An edit sends the plan back to the planner
        without counting as an iteration (DeerFlow's rule). ``feedback``: what the first plan answers
        (a fork's plan edit)."""
        request, state = run.request, run.state
        while state.plan_iterations < request.max_plan_iterations:
            reply, plan = await usable_plan(run, feedback)
            if plan is None:
                return
            if plan.has_enough_context and not self._review_without_research(run):
                return
            verdict = Feedback(accepted=True) if request.auto_accept_plan else await review(run)
            if verdict is None:
                return
            if not verdict.accepted:
                feedback = verdict.as_message
                state.planner_messages += [ChatMessage(role="assistant", content=reply.content),
                                           ChatMessage(role="user", name="feedback", content=feedback)]
                continue
            if plan.has_enough_context:  # the person agreed that no research is needed
                state.note(NO_RESEARCH_NOTE)
                return
            state.plan_iterations += 1
            await run_steps(run)
            if state.status.budget is not None and state.status.budget.cut_short:
                return  # a person (or the timeout) chose to finish at the budget: no more plans

    def _review_without_research(self, run: ResearchRun) -> bool:
        """Whether a plan that claims enough context goes to the person's review. A first plan
        does (a weak model says so too easily), unless plans are auto-accepted: then the run says
        that research was skipped. A later plan ends the research, as in DeerFlow."""
        first = run.state.plan_iterations == 0
        if first and not run.request.auto_accept_plan and workflow.patched(REVIEW_NO_RESEARCH_PATCH):
            return True
        if first:
            run.state.note(NO_RESEARCH_NOTE)
        return False

    def _finish(self, result: ResearchResult) -> ResearchResult:
        status = self._state.status
        result.usage = status.usage
        result.notes = list(status.notes)
        result.decisions = list(status.decisions)
        result.budget = status.budget
        status.outcome = result.outcome
        status.error = result.error
        self._state.enter(Phase.FAILED if result.outcome is Outcome.FAILED else Phase.COMPLETED)
        return result

    def _record_cancel(self) -> None:
        """Who cancelled the run (the reason our doors give a cancel request names them), kept in
        its status with its outcome; the run still ends cancelled, as Temporal and every client expect."""
        reason = workflow.cancellation_reason()
        if reason is None:  # an inner task's cancellation is not the run's
            return
        if not self._cancelling_itself:  # the run's own was recorded as it decided
            self._state.decide("cancel", "cancel", actor_of_cancel(reason))
            self._state.status.outcome = Outcome.CANCELLED
        self._state.publish_usage()  # its last spend, for lists and costs: a cancelled run has no result
        count_end(Outcome.CANCELLED)

    def _failed(self, error: ActivityError) -> ApplicationError:
        """The run's failure, said in its status and in the error it ends with."""
        status = self._state.status
        failed_in = status.phase
        status.error = failure_message(error)
        status.outcome = Outcome.FAILED
        self._state.enter(Phase.FAILED)
        return ApplicationError(f"Research run failed while {failed_in.value}: {status.error}",
                                type="ResearchFailed", non_retryable=True)

    # ------------------------------------------------------------------ messages from people
    # Signals and updates take their inputs untyped (``*inputs``), so no value (a number, nothing, two
    # values) can fail decoding, and one value (the ``temporal`` CLI's and the Web UI's single input)
    # arrives as the same plain JSON value as our doors' two (the value and its sender): the SDK decodes
    # typed arguments only when their count matches the signature, so a typed update got a bare dict
    # from those tools and failed its workflow task (issue #48 item 1). Anything but one good, timely
    # message is dropped: a signal's is recorded as an "ignored" event with the reason, which
    # ``status``, ``watch`` and the Web UI show to its sender; an update's is refused by its validator
    # before it reaches history, to its caller. A handler parses what its validator has just accepted,
    # in the same activation, so it cannot fail where the validator did not.

    @workflow.signal(name=Awaiting.PLAN_FEEDBACK.value)
    def plan_feedback(self, *inputs: object) -> None:
        """DeerFlow's protocol as a signal; a bad or ill-timed one never fails or wedges the run."""
        try:
            parsed = parse_feedback(*message_inputs(inputs))
            self._ensure_awaiting(Awaiting.PLAN_FEEDBACK, self._inbox.feedback)
        except InvalidFeedback as error:
            self._ignore(Awaiting.PLAN_FEEDBACK, error)
            return
        self._inbox.feedback.append(parsed)

    @workflow.update(name=REVIEW_PLAN_UPDATE)
    def review_plan(self, *inputs: object) -> ReviewOutcome:
        """``"[ACCEPTED]"`` or ``"[EDIT_PLAN] …"``, and optionally its sender."""
        parsed = parse_feedback(*message_inputs(inputs))
        self._inbox.feedback.append(parsed)
        if parsed.accepted:
            return ReviewOutcome(accepted=True, message="Plan accepted; the research steps will run now.")
        return ReviewOutcome(accepted=False, message="Feedback sent to the planner; a revised plan will follow.")

    @review_plan.validator
    def _validate_review(self, *inputs: object) -> None:
        # Runs before the update is written to history: rejects it without a trace.
        parse_feedback(*message_inputs(inputs))
        self._ensure_awaiting(Awaiting.PLAN_FEEDBACK, self._inbox.feedback)

    @workflow.signal(name=Awaiting.CLARIFICATION.value)
    def clarification_answer(self, *inputs: object) -> None:
        try:
            for value in inputs:  # a payload the worker could not decode says so first
                refuse_undecodable(value)
            self._ensure_awaiting(Awaiting.CLARIFICATION, self._inbox.clarifications)
            self._inbox.clarifications.append(nonempty_answer(*message_inputs(inputs)))
        except InvalidFeedback as error:
            self._ignore(Awaiting.CLARIFICATION, error)

    @workflow.update(name=Awaiting.CLARIFICATION.value)
    def answer_clarification(self, *inputs: object) -> ReviewOutcome:
        """The answer as a JSON string, and optionally its sender."""
        self._inbox.clarifications.append(nonempty_answer(*message_inputs(inputs)))
        return ReviewOutcome(accepted=True, message="Answer received; the coordinator continues.")

    @answer_clarification.validator
    def _validate_answer(self, *inputs: object) -> None:
        nonempty_answer(*message_inputs(inputs))
        self._ensure_awaiting(Awaiting.CLARIFICATION, self._inbox.clarifications)

    @workflow.signal(name=Awaiting.BUDGET.value)
    def budget(self, *inputs: object) -> None:
        """A budget decision as a signal: ``{"action": "raise", "tokens": N}``, ``finish`` or ``cancel``."""
        try:
            decision = parse_budget_decision(*message_inputs(inputs, DECISION_SHAPE), self._state.status.budget)
            self._ensure_awaiting(Awaiting.BUDGET, self._inbox.budget)
        except InvalidFeedback as error:
            self._ignore(Awaiting.BUDGET, error)
            return
        self._inbox.budget.append(decision)

    @workflow.update(name=DECIDE_BUDGET_UPDATE)
    def decide_budget(self, *inputs: object) -> ReviewOutcome:
        """The same object as the ``budget`` signal, and optionally its sender."""
        decision, by = parse_budget_decision(*message_inputs(inputs, DECISION_SHAPE), self._state.status.budget)
        self._inbox.budget.append((decision, by))
        return ReviewOutcome(accepted=True, message=f"Budget decision taken: {decision.as_text()}.")

    @decide_budget.validator
    def _validate_budget(self, *inputs: object) -> None:
        parse_budget_decision(*message_inputs(inputs, DECISION_SHAPE), self._state.status.budget)
        self._ensure_awaiting(Awaiting.BUDGET, self._inbox.budget)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RunStatus:
        return self._state.view()

    @workflow.query(name=CHECKPOINT_QUERY)
    def checkpoint(self) -> RunState:
        """Everything the run knows, as continue-as-new hands it on: what a fork of it reuses."""
        return self._state

    def _ensure_awaiting(self, what: Awaiting, inbox: Sized) -> None:
        status = self._state.status
        if status.awaiting is not what or inbox:
            raise InvalidFeedback(f"the run is not waiting for {what.value} (it is {status.phase.value})")

    def _ignore(self, signal: Awaiting, error: InvalidFeedback) -> None:
        workflow.logger.warning("Ignored %s: %s", signal.value, error)
        self._state.record("ignored", f"{signal.value}: {error}")
