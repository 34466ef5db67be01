"""``DeepResearchWorkflow``: DeerFlow's research pipeline as one durable, replayable workflow.

coordinator (⇄ clarification) -> background investigation -> planner <-> human review
-> step loop -> reporter

The workflow only decides; every model call, search, crawl and Python run is an activity. A
human review is a durable timer-bounded wait on a signal or update, so a run can sit paused for
days without holding worker memory, and survive worker and server restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.activity_options import LOAD_RUN_CONFIG, execute
    from workflows.activity_slots import ActivitySlots
    from workflows.agent_loop import run_agent
    from workflows.agents import agent_for
    from workflows.errors import failure_message
    from workflows.messages import background_message, observation_message, reporter_messages, step_task
    from workflows.model_calls import call_model
    from workflows.models import (
        MAX_EVENTS,
        WORKFLOW_TYPE,
        ChatMessage,
        ChatRequest,
        ModelTier,
        Outcome,
        Phase,
        Plan,
        PlanVersion,
        ProgressEvent,
        ResearchRequest,
        ResearchResult,
        ReviewOutcome,
        ReviewTimeoutAction,
        RunCheckpoint,
        RunConfig,
        RunContinuation,
        RunStatus,
        StepState,
        StepStatus,
    )
    from workflows.plan_parsing import PlanParseError, parse_plan
    from workflows.progress import current_details
    from workflows.review import Feedback, InvalidFeedback, parse_feedback
    from workflows.run_input import parse_inputs
    from workflows.scheduling import step_dependencies
    from workflows.tools import ASK_CLARIFICATION, HANDOFF_TO_PLANNER, ToolContext, mcp_tools_for, search
    from workflows.visibility import AWAITING, PHASE, REPORT_STYLE

AWAITING_PLAN_FEEDBACK = "plan_feedback"
AWAITING_CLARIFICATION = "clarification_answer"
DEFAULT_LOCALE = "en-US"
# Runs recorded before review deadlines existed waited without a timer; replaying them must too.
REVIEW_DEADLINE_PATCH = "review-deadline"
CLARIFICATION_LIMIT_REACHED = (
    "You have asked enough clarifying questions. Do not ask another: hand the request off to the "
    "planner now with `handoff_to_planner`, using everything the user has said."
)


class ReviewTimedOut(Exception):
    """Nobody answered before ``review_timeout``."""


@workflow.defn(dynamic=True)
class DeepResearchWorkflow:
    """Registered as the dynamic workflow so that its start inputs arrive undecoded, whatever
    their number (the SDK drops typed decoding when the count differs from the signature, and
    then a bad input fails the workflow task for ever). Only ``WORKFLOW_TYPE`` is served; the
    public contract is unchanged: one JSON object, a ``ResearchRequest``."""

    def __init__(self) -> None:
        self._status = RunStatus(phase=Phase.STARTING)
        self._feedback_inbox: list[Feedback] = []
        self._clarification_inbox: list[str] = []
        self._observations: list[str] = []
        self._config = RunConfig()
        self._slots = ActivitySlots(None)
        self._crawls: dict[str, asyncio.Task[str]] = {}

    # ------------------------------------------------------------------ the story of a run

    @workflow.run
    async def run(self, inputs: Sequence[RawValue]) -> ResearchResult:
        self._status.started_at = workflow.now().isoformat()
        info = workflow.info()
        try:
            if info.workflow_type != WORKFLOW_TYPE:
                raise ApplicationError(f"Unknown workflow type {info.workflow_type!r}: this worker runs "
                                       f"{WORKFLOW_TYPE}", type="UnknownWorkflowType", non_retryable=True)
            request, continuation = parse_inputs(inputs, workflow.payload_converter(), info.continued_run_id)
        except ApplicationError as error:
            workflow.logger.warning("Rejected the start input: %s", error.message)
            self._status.error = error.message
            self._set_phase(Phase.FAILED)
            raise
        try:
            return await self._research(request, continuation)
        except ActivityError as error:
            # A model call that failed for good (bad key, provider down past all retries).
            failed_in = self._status.phase
            self._status.error = failure_message(error)
            self._set_phase(Phase.FAILED)
            raise ApplicationError(
                f"Research run failed while {failed_in.value}: {self._status.error}",
                type="ResearchFailed", non_retryable=True,
            ) from error

    async def _research(self, request: ResearchRequest, continuation: RunContinuation | None) -> ResearchResult:
        plan: Plan | None = None
        plan_iterations = 0
        feedback_text: str | None = None
        if continuation is not None:  # resume the step loop where the previous run was
            checkpoint = continuation.checkpoint
            self._status = checkpoint.status
            self._use_config(checkpoint.config)
            self._observations = list(checkpoint.observations)
            plan, plan_iterations, locale = checkpoint.plan, checkpoint.plan_iterations, checkpoint.locale
            planner_messages = list(checkpoint.planner_messages)
            self._event("phase", f"continued as a new run after {len(self._observations)} finding(s)")
            await self._run_steps(plan, locale, request, planner_messages, plan_iterations)
        else:
            # It also refuses resources outside the worker's resource roots (input only: no new command).
            self._use_config(await execute(LOAD_RUN_CONFIG, list(request.resources), RunConfig))
            self._status.offline_demo = self._config.offline_demo
            if self._config.search_attributes_enabled:
                workflow.upsert_search_attributes([REPORT_STYLE.value_set(request.report_style.value)])
            handoff = await self._coordinate(request)
            if isinstance(handoff, str):
                return self._finish(ResearchResult(report=handoff, locale=request.locale or DEFAULT_LOCALE,
                                                   outcome=Outcome.DIRECT_REPLY))
            topic, locale, clarified_question = handoff
            self._status.locale = locale
            planner_messages = [ChatMessage(role="user", content=clarified_question)]
            if request.enable_background_investigation:
                planner_messages.extend(await self._investigate(topic, request))

        while plan_iterations < request.max_plan_iterations:
            reply = await self._plan(request, locale, planner_messages)
            try:
                plan = parse_plan(reply.content, request.max_step_num, locale)
            except PlanParseError as error:
                workflow.logger.warning("Planner output unusable: %s", error)
                self._event("error", f"Planner output unusable: {error}")
                if plan_iterations == 0:
                    return self._finish(ResearchResult(
                        report=f"The planner did not produce a usable plan: {error}", locale=locale,
                        outcome=Outcome.FAILED, error=str(error),
                    ))
                break  # later iterations write the report from what is known
            self._show_plan(plan, feedback_text)
            if plan.has_enough_context:
                break
            if not request.auto_accept_plan:
                try:
                    feedback = await self._await_review(request)
                except ReviewTimedOut:
                    action = request.review_timeout_action
                    self._event("review", f"No review within {request.review_timeout}: {action.value}")
                    if action is ReviewTimeoutAction.CANCEL:
                        return self._finish(ResearchResult(
                            report=(f"The plan was not reviewed within {request.review_timeout}, so the run "
                                    "was cancelled without researching (review_timeout_action=cancel)."),
                            plan=plan, locale=locale, outcome=Outcome.CANCELLED,
                        ))
                    if action is ReviewTimeoutAction.REPORT:
                        break
                    feedback = Feedback(accepted=True)
                if not feedback.accepted:
                    feedback_text = feedback.as_message
                    planner_messages.append(ChatMessage(role="assistant", content=reply.content))
                    planner_messages.append(ChatMessage(role="user", name="feedback", content=feedback_text))
                    continue
            plan_iterations += 1
            self._status.plan_iterations = plan_iterations
            await self._run_steps(plan, locale, request, planner_messages, plan_iterations)

        assert plan is not None  # the loop runs at least once and every exit above sets it
        report = await self._report(plan, locale, request)
        return self._finish(ResearchResult(report=report, plan=plan, locale=locale))

    # ------------------------------------------------------------------ nodes

    async def _coordinate(self, request: ResearchRequest) -> str | tuple[str, str, str]:
        """Coordinator turns: a direct reply (str), or a handoff (topic, locale, clarified question).

        With clarification enabled the coordinator may ask the user questions first; at the
        round limit it must hand off, and the whole exchange is what the planner sees.
        """
        self._set_phase(Phase.COORDINATING)
        conversation = [ChatMessage(role="user", content=request.question)]
        rounds = 0
        while True:
            may_ask = request.enable_clarification and rounds < request.max_clarification_rounds
            at_limit = request.enable_clarification and not may_ask
            reply = await call_model(
                ChatRequest(
                    prompt="coordinator",
                    prompt_vars=self._prompt_vars(request.locale or "the language of the user's message"),
                    messages=conversation + ([ChatMessage(role="user", name="system",
                                                          content=CLARIFICATION_LIMIT_REACHED)] if at_limit else []),
                    tools=[HANDOFF_TO_PLANNER, ASK_CLARIFICATION] if may_ask else [HANDOFF_TO_PLANNER],
                ),
                self._status.usage,
            )
            calls = {call.name: call for call in reply.tool_calls}
            handoff = calls.get(HANDOFF_TO_PLANNER.name)
            question = calls.get(ASK_CLARIFICATION.name)
            if handoff is None and question is not None and may_ask:
                asked = str(question.arguments.get("question") or reply.content or "Could you say more?")
                try:
                    answer = await self._await_clarification(asked, request)
                except ReviewTimedOut:
                    self._event("clarification", "No answer in time: researching what was asked so far.")
                    return self._handoff(None, request, conversation)
                conversation += [ChatMessage(role="assistant", content=asked), ChatMessage(role="user", content=answer)]
                rounds += 1
                self._status.clarification_rounds = rounds
                continue
            if handoff is None and rounds == 0:
                return reply.content
            return self._handoff(handoff.arguments if handoff else None, request, conversation)

    def _handoff(self, arguments: dict | None, request: ResearchRequest,
                 conversation: list[ChatMessage]) -> tuple[str, str, str]:
        arguments = arguments or {}
        clarified = "\n\n".join(
            message.content if message.role == "user" else f"(Assistant asked: {message.content})"
            for message in conversation
        )
        topic = str(arguments.get("research_topic") or clarified)
        locale = request.locale or str(arguments.get("locale") or DEFAULT_LOCALE)
        return topic, locale, clarified

    async def _investigate(self, topic: str, request: ResearchRequest) -> list[ChatMessage]:
        """A quick search before planning; a failure only costs the planner some context."""
        self._set_phase(Phase.BACKGROUND_INVESTIGATION)
        try:
            response = await search(topic, request.max_search_results)
        except ActivityError as error:
            workflow.logger.warning("Background investigation failed: %s", failure_message(error))
            self._event("error", f"Background investigation failed: {failure_message(error)}")
            return []
        return [background_message(response)]

    async def _plan(self, request: ResearchRequest, locale: str, planner_messages: list[ChatMessage]) -> ChatMessage:
        self._set_phase(Phase.PLANNING)
        vars_ = {**self._prompt_vars(locale), "max_step_num": str(request.max_step_num)}
        tier = ModelTier.REASONING if request.enable_deep_thinking else ModelTier.BASIC
        observations = [observation_message(observation) for observation in self._observations]
        return await call_model(
            ChatRequest(prompt="planner", prompt_vars=vars_, messages=planner_messages + observations,
                        model_tier=tier, json_mode=True),
            self._status.usage,
        )

    async def _await_review(self, request: ResearchRequest) -> Feedback:
        self._await_person(Phase.AWAITING_REVIEW, AWAITING_PLAN_FEEDBACK, request)
        if workflow.patched(REVIEW_DEADLINE_PATCH):
            await self._wait(lambda: bool(self._feedback_inbox), request.review_timeout, "plan review deadline")
        else:
            await workflow.wait_condition(lambda: bool(self._feedback_inbox))
        feedback = self._feedback_inbox.pop(0)
        self._event("review", feedback.as_message)
        return feedback

    async def _await_clarification(self, question: str, request: ResearchRequest) -> str:
        self._status.question = question
        self._await_person(Phase.AWAITING_CLARIFICATION, AWAITING_CLARIFICATION, request)
        self._event("clarification", f"Asked: {question}")
        await self._wait(lambda: bool(self._clarification_inbox), request.review_timeout, "clarification deadline")
        self._status.question = None
        answer = self._clarification_inbox.pop(0)
        self._event("clarification", f"Answered: {answer}")
        self._set_phase(Phase.COORDINATING)
        return answer

    async def _wait(self, ready: Callable[[], bool], timeout: timedelta, summary: str) -> None:
        """A durable, timer-bounded wait: no worker memory is held while it lasts."""
        try:
            await workflow.wait_condition(ready, timeout=timeout, timeout_summary=summary)
        except TimeoutError as error:
            self._status.awaiting = None
            raise ReviewTimedOut(summary) from error

    async def _run_steps(self, plan: Plan, locale: str, request: ResearchRequest,
                         planner_messages: list[ChatMessage], plan_iterations: int) -> None:
        """Run every unfinished step: in order (DeerFlow), or as their dependencies allow."""
        self._set_phase(Phase.RESEARCHING)
        pending = [index for index, step in enumerate(plan.steps) if step.execution_res is None]
        if request.parallel_steps:
            finished: set[int] = set(range(len(plan.steps))) - set(pending)

            async def run_when_ready(index: int) -> None:
                needs = step_dependencies(plan, index)
                await workflow.wait_condition(lambda: needs <= finished)
                await self._run_step(plan, index, locale, request, context=needs)
                finished.add(index)

            await asyncio.gather(*(run_when_ready(index) for index in pending))
        else:
            for index in pending:
                if self._history_is_long():
                    done = [plan.steps[i].execution_res or "" for i in pending if plan.steps[i].execution_res]
                    checkpoint = RunCheckpoint(
                        plan=plan, plan_iterations=plan_iterations, locale=locale,
                        planner_messages=planner_messages, observations=self._observations + done,
                        status=self._status, config=self._config,
                    )
                    workflow.continue_as_new(args=[request, RunContinuation(
                        checkpoint=checkpoint, written_by_run_id=workflow.info().run_id)])
                await self._run_step(plan, index, locale, request)
        # Observations keep plan order, however the steps interleaved.
        self._observations.extend(plan.steps[index].execution_res or "" for index in pending)

    def _history_is_long(self) -> bool:
        """Hand over to a fresh run when the server suggests it, or past the configured length."""
        info = workflow.info()
        limit = self._config.continue_as_new_after_events
        return info.is_continue_as_new_suggested() or (limit is not None and info.get_current_history_length() > limit)

    async def _run_step(self, plan: Plan, index: int, locale: str, request: ResearchRequest,
                        context: set[int] | None = None) -> None:
        step = plan.steps[index]
        status = self._status.steps[index]
        status.state, status.started_at = StepState.RUNNING, workflow.now().isoformat()
        self._event("step_started", step.title, index)
        agent, tool_guidance = agent_for(step.step_type, has_resources=bool(request.resources))
        async with self._slots.held():
            mcp_specs, mcp_routes = await mcp_tools_for(agent.name, request.mcp_servers)
        finding = await run_agent(
            agent,
            {**self._prompt_vars(locale), "tool_guidance": tool_guidance},
            step_task(plan, step, locale, context, request.resources if "local_search_tool" in agent.tools else None),
            self._config.agent_recursion_limit,
            ToolContext(max_search_results=request.max_search_results, resources=tuple(request.resources),
                        crawls=self._crawls, mcp_routes=mcp_routes),
            self._status.usage,
            extra_tools=mcp_specs,
            slots=self._slots,
            max_tool_calls=self._config.max_tool_calls_per_turn,
        )
        step.execution_res = finding
        status.state, status.finished_at = StepState.DONE, workflow.now().isoformat()
        status.finding_preview = finding[:300]
        self._event("step_done", step.title, index)

    async def _report(self, plan: Plan, locale: str, request: ResearchRequest) -> str:
        self._set_phase(Phase.REPORTING)
        reply = await call_model(
            ChatRequest(
                prompt="reporter",
                prompt_vars={**self._prompt_vars(locale), "report_style": request.report_style.value},
                messages=reporter_messages(plan, self._observations),
            ),
            self._status.usage,
        )
        return reply.content

    # ------------------------------------------------------------------ messages from people

    @workflow.signal(name="plan_feedback")
    def plan_feedback(self, feedback: str) -> None:
        """DeerFlow's protocol as a signal. Bad or ill-timed feedback is logged and dropped, so
        one wrong message can never fail or wedge a paused run."""
        try:
            parsed = parse_feedback(feedback)
            self._ensure_awaiting(AWAITING_PLAN_FEEDBACK, self._feedback_inbox)
        except InvalidFeedback as error:
            workflow.logger.warning("Ignored plan_feedback: %s", error)
            return
        self._feedback_inbox.append(parsed)

    @workflow.update(name="review_plan")
    def review_plan(self, feedback: str) -> ReviewOutcome:
        parsed = parse_feedback(feedback)
        self._feedback_inbox.append(parsed)
        if parsed.accepted:
            return ReviewOutcome(accepted=True, message="Plan accepted; the research steps will run now.")
        return ReviewOutcome(accepted=False, message="Feedback sent to the planner; a revised plan will follow.")

    @review_plan.validator
    def _validate_review(self, feedback: str) -> None:
        # Runs before the update is written to history: rejects it without a trace.
        parse_feedback(feedback)
        self._ensure_awaiting(AWAITING_PLAN_FEEDBACK, self._feedback_inbox)

    @workflow.signal(name="clarification_answer")
    def clarification_answer(self, answer: str) -> None:
        try:
            self._ensure_awaiting(AWAITING_CLARIFICATION, self._clarification_inbox)
            self._clarification_inbox.append(_nonempty_answer(answer))
        except InvalidFeedback as error:
            workflow.logger.warning("Ignored clarification_answer: %s", error)

    @workflow.update(name="clarification_answer")
    def answer_clarification(self, answer: str) -> ReviewOutcome:
        self._clarification_inbox.append(_nonempty_answer(answer))
        return ReviewOutcome(accepted=True, message="Answer received; the coordinator continues.")

    @answer_clarification.validator
    def _validate_answer(self, answer: str) -> None:
        _nonempty_answer(answer)
        self._ensure_awaiting(AWAITING_CLARIFICATION, self._clarification_inbox)

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        return self._status

    # ------------------------------------------------------------------ helpers

    def _use_config(self, config: RunConfig) -> None:
        self._config = config
        self._slots = ActivitySlots(config.max_activities_in_flight)

    def _ensure_awaiting(self, what: str, inbox: list) -> None:  # type: ignore[type-arg]
        if self._status.awaiting != what or inbox:
            raise InvalidFeedback(f"the run is not waiting for {what} (it is {self._status.phase.value})")

    def _await_person(self, phase: Phase, what: str, request: ResearchRequest) -> None:
        now = workflow.now()
        self._status.awaiting_since = now.isoformat()
        self._status.review_deadline = (now + request.review_timeout).isoformat()
        self._set_phase(phase, awaiting=what)

    def _prompt_vars(self, locale: str) -> dict[str, str]:
        return {"CURRENT_TIME": workflow.now().strftime("%a %b %d %Y %H:%M:%S %z"), "locale": locale}

    def _event(self, kind: str, message: str, step_index: int | None = None) -> None:
        self._status.events.append(ProgressEvent(at=workflow.now().isoformat(), kind=kind,  # type: ignore[arg-type]
                                                 message=message, step_index=step_index))
        del self._status.events[:-MAX_EVENTS]
        workflow.set_current_details(current_details(self._status))

    def _set_phase(self, phase: Phase, awaiting: str | None = None) -> None:
        self._status.phase = phase
        self._status.awaiting = awaiting
        if self._config.search_attributes_enabled:
            workflow.upsert_search_attributes([PHASE.value_set(phase.value), AWAITING.value_set(awaiting or "")])
        self._event("phase", phase.value + (f" (awaiting {awaiting})" if awaiting else ""))

    def _show_plan(self, plan: Plan, feedback: str | None) -> None:
        self._status.plan = plan
        self._status.plan_history.append(
            PlanVersion(version=len(self._status.plan_history) + 1, plan=plan.model_copy(deep=True), feedback=feedback)
        )
        self._status.steps = [
            StepStatus(index=index, title=step.title, step_type=step.step_type,
                       state=StepState.DONE if step.execution_res is not None else StepState.PENDING)
            for index, step in enumerate(plan.steps)
        ]
        self._event("plan", f"Plan v{len(self._status.plan_history)}: {plan.title} ({len(plan.steps)} steps)")

    def _finish(self, result: ResearchResult) -> ResearchResult:
        result.usage = self._status.usage
        self._status.error = result.error
        self._set_phase(Phase.FAILED if result.outcome is Outcome.FAILED else Phase.COMPLETED)
        return result


def _nonempty_answer(answer: object) -> str:
    if not isinstance(answer, str) or not answer.strip():
        raise InvalidFeedback("a clarification answer must be a non-empty string")
    return answer.strip()
