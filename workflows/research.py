"""``DeepResearchWorkflow``: DeerFlow's research pipeline as one durable, replayable workflow.

coordinator (⇄ clarification) -> background investigation -> planner <-> human review
-> step loop -> reporter

The workflow only decides; every model call, search, crawl and Python run is an activity. A
human review is a durable timer-bounded wait on a signal or update, so a run can sit paused for
days without holding worker memory, and survive worker and server restarts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence, Sized
from datetime import timedelta
from typing import NoReturn

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
    from workflows.model_calls import call_model, chat
    from workflows.models import (
        MAX_EVENTS,
        MAX_IGNORED_EVENTS,
        WORKFLOW_TYPE,
        Awaiting,
        ChatMessage,
        ChatRequest,
        ChatResponse,
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
        RunConfig,
        RunContinuation,
        RunState,
        RunStatus,
        StepState,
        StepStatus,
        StepType,
    )
    from workflows.plan_parsing import PlanParseError, parse_plan, require_steps
    from workflows.progress import current_details
    from workflows.review import (
        Feedback,
        InvalidFeedback,
        nonempty_answer,
        one_input,
        parse_feedback,
        refuse_undecodable,
    )
    from workflows.run_input import parse_inputs
    from workflows.run_metrics import count_phase
    from workflows.scheduling import step_dependencies
    from workflows.tools import ASK_CLARIFICATION, HANDOFF_TO_PLANNER, ToolContext, mcp_tools_for, search
    from workflows.visibility import AWAITING, PHASE, REPORT_STYLE

DEFAULT_LOCALE = "en-US"
# Runs recorded before review deadlines existed waited without a timer; replaying them must too.
REVIEW_DEADLINE_PATCH = "review-deadline"
# An unusable plan (bad JSON, no title, no steps) gets one re-ask quoting the error (issue #11).
PLAN_REASK_PATCH = "plan-reask"
# A first plan that claims to need no research goes to the person's review like any other.
REVIEW_NO_RESEARCH_PATCH = "review-no-research"
# A run without resources loads its config beside the coordinator's first turn, not before it.
CONCURRENT_CONFIG_PATCH = "concurrent-run-config"
DIRECT_REPLY_NOTE = ("Direct reply: the coordinator answered without handing off to research "
                     "(no plan, no search). A model that never calls tools ends here.")
NO_RESEARCH_NOTE = ("No research needed: the planner judged that it had enough context, so no "
                    "research step ran.")
ZERO_FINDINGS_NOTE = ("This report was written with zero research findings: it rests on the model's "
                      "own knowledge only.")
# A research step whose agent ran no tool (a model that never calls them) says so (issue #24).
NO_SEARCH_PATCH = "no-search-note"
NO_SEARCH_NOTE = ("Research step {number} ({title}) made no search: the researcher called no tool, so its "
                  "findings rest on the model's own knowledge.")
CLARIFICATION_LIMIT_REACHED = (
    "You have asked enough clarifying questions. Do not ask another: hand the request off to the "
    "planner now with `handoff_to_planner`, using everything the user has said."
)


class ReviewTimedOut(Exception):
    """Nobody answered before ``review_timeout``."""


class RunEnded(Exception):
    """The run ends early with ``result``: a direct reply, no usable plan, or a review not given in time.

    Raised from deep in a stage so that ``run`` keeps one exit for every ending.
    """

    def __init__(self, result: ResearchResult) -> None:
        super().__init__(result.outcome.value)
        self.result = result


@workflow.defn(dynamic=True)
class DeepResearchWorkflow:
    """Registered as the dynamic workflow so that its start inputs arrive undecoded, whatever
    their number (the SDK drops typed decoding when the count differs from the signature, and
    then a bad input fails the workflow task for ever). Only ``WORKFLOW_TYPE`` is served; the
    public contract is unchanged: one JSON object, a ``ResearchRequest``.

    Everything the run knows is one ``RunState`` (samples-python's ``safe_message_handlers``
    shape): methods read and change it, the ``status`` query shows it, and continue-as-new copies
    it whole. What is on ``self`` besides is not state: messages waiting for the main method (only
    while the run awaits a person, so never at a continue-as-new) and run-time resources rebuilt
    from the state.
    """

    def __init__(self) -> None:
        self._state = RunState()
        self._feedback_inbox: list[Feedback] = []
        self._clarification_inbox: list[str] = []
        self._slots = ActivitySlots(None)
        self._crawls: dict[str, asyncio.Task[str]] = {}

    @property
    def _status(self) -> RunStatus:
        return self._state.status

    @property
    def run_config(self) -> RunConfig:
        """The worker-side settings this run follows; ``activity_options`` reads its queue choices."""
        return self._state.config

    # ------------------------------------------------------------------ the story of a run

    @workflow.run
    async def run(self, inputs: Sequence[RawValue]) -> ResearchResult:
        request, continued = self._accept(inputs)
        try:
            if continued:  # finish the steps the previous run had started, then go on as it would have
                await self._run_steps(request)
            else:
                topic = await self._configure_and_coordinate(request)  # may end the run with a direct reply
                await self._investigate(topic, request)
            await self._plan_review_and_research(request)  # may end it: no usable plan, no review in time
            report = await self._report(request)
            return self._finish(ResearchResult(report=report, plan=self._state.plan, locale=self._state.locale))
        except RunEnded as ended:
            return self._finish(ended.result)
        except ActivityError as error:  # a call that failed for good (bad key, provider down past all retries)
            raise self._failed(error) from error

    def _accept(self, inputs: Sequence[RawValue]) -> tuple[ResearchRequest, bool]:
        """The request, and whether this run continues another (whose state it then takes over).

        A bad input fails the run at once, with the reason in its status and its failure.
        """
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
        if continuation is None:
            return request, False
        self._state = continuation.checkpoint
        self._use_config(self._state.config)
        self._event("phase", f"continued as a new run after {len(self._state.observations)} finding(s)")
        return request, True

    async def _plan_review_and_research(self, request: ResearchRequest) -> None:
        """Plan, have the plan reviewed, run its steps; again until ``max_plan_iterations`` plans
        have run or the planner has enough context. An edit sends the plan back to the planner
        without counting as an iteration (DeerFlow's rule)."""
        feedback: str | None = None
        while self._state.plan_iterations < request.max_plan_iterations:
            reply, plan = await self._usable_plan(request, feedback)
            if plan is None:
                return
            if plan.has_enough_context and not self._review_without_research(request):
                return
            review = Feedback(accepted=True) if request.auto_accept_plan else await self._review(request)
            if review is None:
                return
            if not review.accepted:
                feedback = review.as_message
                self._state.planner_messages += [ChatMessage(role="assistant", content=reply.content),
                                                 ChatMessage(role="user", name="feedback", content=feedback)]
                continue
            if plan.has_enough_context:  # the person agreed that no research is needed
                self._note(NO_RESEARCH_NOTE)
                return
            self._state.plan_iterations += 1
            self._status.plan_iterations = self._state.plan_iterations
            await self._run_steps(request)

    def _review_without_research(self, request: ResearchRequest) -> bool:
        """Whether a plan that claims enough context goes to the person's review. A first plan
        does (a weak model says so too easily), unless plans are auto-accepted: then the run says
        that research was skipped. A later plan ends the research, as in DeerFlow."""
        first = self._state.plan_iterations == 0
        if first and not request.auto_accept_plan and workflow.patched(REVIEW_NO_RESEARCH_PATCH):
            return True
        if first:
            self._note(NO_RESEARCH_NOTE)
        return False

    # ------------------------------------------------------------------ stages

    async def _configure_and_coordinate(self, request: ResearchRequest) -> str:
        """The run config, then the coordinator; or both at once when the config cannot refuse the
        run (no resources to check) and the coordinator does not need it. One workflow-task
        round trip less before the background search: both are scheduled by the first task. (The
        coordinator's call then goes on the model queue: the config that would put it on the
        main queue, ``RunConfig.main_queue_kinds``, has not arrived yet.)"""
        if request.resources or not workflow.patched(CONCURRENT_CONFIG_PATCH):
            await self._configure(request)
            return await self._coordinate(request)
        _, topic = await asyncio.gather(self._configure(request, concurrent=True), self._coordinate(request))
        return topic

    async def _configure(self, request: ResearchRequest, concurrent: bool = False) -> None:
        # It also refuses resources outside the worker's resource roots (input only: no new command).
        self._use_config(await execute(LOAD_RUN_CONFIG, list(request.resources), RunConfig))
        config = self._state.config
        self._status.offline_providers = [name for name, offline in (("model", config.offline_demo),
                                                                     ("search", config.offline_search)) if offline]
        self._status.offline_demo = bool(self._status.offline_providers)
        if self._state.config.search_attributes_enabled:
            workflow.upsert_search_attributes([REPORT_STYLE.value_set(request.report_style.value)])
            if concurrent:  # the phase was set before the config said the attributes exist
                self._upsert_phase()

    async def _coordinate(self, request: ResearchRequest) -> str:
        """Coordinator turns, ending in a handoff to the planner (the research topic is returned)
        or in a direct reply, which ends the run.

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
                summary="coordinator",
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
                self._note(DIRECT_REPLY_NOTE)
                raise RunEnded(ResearchResult(report=reply.content, locale=request.locale or DEFAULT_LOCALE,
                                              outcome=Outcome.DIRECT_REPLY))
            return self._handoff(handoff.arguments if handoff else None, request, conversation)

    def _handoff(self, arguments: dict | None, request: ResearchRequest, conversation: list[ChatMessage]) -> str:
        """Start the planner's conversation from the (clarified) request; returns the research topic."""
        arguments = arguments or {}
        clarified = "\n\n".join(
            message.content if message.role == "user" else f"(Assistant asked: {message.content})"
            for message in conversation
        )
        self._state.locale = request.locale or str(arguments.get("locale") or DEFAULT_LOCALE)
        self._status.locale = self._state.locale
        self._state.planner_messages = [ChatMessage(role="user", content=clarified)]
        return str(arguments.get("research_topic") or clarified)

    async def _investigate(self, topic: str, request: ResearchRequest) -> None:
        """A quick search before planning; a failure only costs the planner some context."""
        if not (request.enable_background_investigation and request.enable_web_search):
            return
        self._set_phase(Phase.BACKGROUND_INVESTIGATION)
        try:
            response = await search(topic, request.max_search_results)
        except ActivityError as error:
            workflow.logger.warning("Background investigation failed: %s", failure_message(error))
            self._event("error", f"Background investigation failed: {failure_message(error)}")
            return
        self._state.planner_messages.append(background_message(response))

    async def _plan(self, request: ResearchRequest, reask: list[ChatMessage] | None = None) -> ChatResponse:
        self._set_phase(Phase.PLANNING)
        vars_ = {**self._prompt_vars(self._state.locale), "max_step_num": str(request.max_step_num)}
        tier = ModelTier.REASONING if request.enable_deep_thinking else ModelTier.BASIC
        observations = [observation_message(observation) for observation in self._state.observations]
        return await chat(
            ChatRequest(prompt="planner", prompt_vars=vars_,
                        messages=self._state.planner_messages + observations + (reask or []),
                        model_tier=tier, json_mode=True, response_schema="plan"),
            self._status.usage,
            summary=f"planner · v{len(self._status.plan_history) + 1}" + (" · re-ask" if reask else ""),
        )

    async def _usable_plan(self, request: ResearchRequest, feedback: str | None) -> tuple[ChatMessage, Plan | None]:
        """The planner's reply and its plan, now the run's. An unusable plan (not JSON even after
        repair, no title, no steps, cut at the output cap) is re-asked once, quoting the error;
        if that fails too, a first plan ends the run and a later one leaves the run to report
        from what it knows (None)."""
        response = await self._plan(request)
        try:
            return response.message, self._adopt_plan(response, request, feedback)
        except PlanParseError as error:
            if not workflow.patched(PLAN_REASK_PATCH):
                return response.message, self._plan_unusable(error)
            self._event("error", f"Planner output unusable, asking again: {error}")
            reask = [ChatMessage(role="assistant", content=response.message.content),
                     ChatMessage(role="user", name="system", content=(
                         f"Your plan could not be used: {error}. Answer again with one JSON object that "
                         "follows the plan schema: a title and at least one step, each with a title."))]
            response = await self._plan(request, reask)
            try:
                return response.message, self._adopt_plan(response, request, feedback)
            except PlanParseError as again:
                return response.message, self._plan_unusable(again)

    def _adopt_plan(self, response: ChatResponse, request: ResearchRequest, feedback: str | None) -> Plan:
        """The planner's plan, now the run's; raises ``PlanParseError`` for an unusable one."""
        try:
            plan = parse_plan(response.message.content, request.max_step_num, self._state.locale)
        except PlanParseError as error:
            if response.truncated:
                raise PlanParseError(f"{error} (the reply was cut at the output cap of "
                                     f"{response.output_cap} tokens: write a shorter plan)") from error
            raise
        if not plan.steps and workflow.patched(PLAN_REASK_PATCH):
            require_steps(plan)
        self._show_plan(plan, feedback)
        return plan

    def _plan_unusable(self, error: PlanParseError) -> None:
        """An unusable first plan ends the run; a later one leaves the run to report (None)."""
        workflow.logger.warning("Planner output unusable: %s", error)
        self._event("error", f"Planner output unusable: {error}")
        if self._state.plan_iterations == 0:
            raise RunEnded(ResearchResult(
                report=f"The planner did not produce a usable plan: {error}", locale=self._state.locale,
                outcome=Outcome.FAILED, error=f"The planner did not produce a usable plan: {error}",
            )) from None

    async def _review(self, request: ResearchRequest) -> Feedback | None:
        """A person's verdict on the plan. Past ``review_timeout``, ``review_timeout_action``
        decides: ``accept`` (the plan runs), ``report`` (None: the report is written from what is
        known) or ``cancel`` (the run ends, saying so)."""
        try:
            return await self._await_review(request)
        except ReviewTimedOut:
            action = request.review_timeout_action
            self._event("review", f"No review within {request.review_timeout}: {action.value}")
            if action is ReviewTimeoutAction.CANCEL:
                raise RunEnded(ResearchResult(
                    report=(f"The plan was not reviewed within {request.review_timeout}, so the run "
                            "was cancelled without researching (review_timeout_action=cancel)."),
                    plan=self._state.plan, locale=self._state.locale, outcome=Outcome.CANCELLED,
                )) from None
            return None if action is ReviewTimeoutAction.REPORT else Feedback(accepted=True)

    async def _await_review(self, request: ResearchRequest) -> Feedback:
        self._await_person(Phase.AWAITING_REVIEW, Awaiting.PLAN_FEEDBACK, request)
        if workflow.patched(REVIEW_DEADLINE_PATCH):
            await self._wait(lambda: bool(self._feedback_inbox), request.review_timeout, "plan review deadline")
        else:
            await workflow.wait_condition(lambda: bool(self._feedback_inbox))
        feedback = self._feedback_inbox.pop(0)
        self._event("review", feedback.as_message)
        return feedback

    async def _await_clarification(self, question: str, request: ResearchRequest) -> str:
        self._status.question = question
        self._await_person(Phase.AWAITING_CLARIFICATION, Awaiting.CLARIFICATION, request)
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

    async def _run_steps(self, request: ResearchRequest) -> None:
        """Run every unfinished step of the plan: in order (DeerFlow), or as their dependencies allow."""
        plan = self._current_plan()
        self._set_phase(Phase.RESEARCHING)
        pending = [index for index, step in enumerate(plan.steps) if step.execution_res is None]
        if request.parallel_steps:
            finished: set[int] = set(range(len(plan.steps))) - set(pending)

            async def run_when_ready(index: int) -> None:
                needs = step_dependencies(plan, index)
                await workflow.wait_condition(lambda: needs <= finished)
                await self._run_step(request, index, context=needs)
                finished.add(index)

            await asyncio.gather(*(run_when_ready(index) for index in pending))
        else:
            for index in pending:
                if self._history_is_long():
                    self._continue_as_new(request, [plan.steps[i].execution_res or "" for i in pending
                                                    if plan.steps[i].execution_res])
                await self._run_step(request, index)
        # Observations keep plan order, however the steps interleaved.
        self._state.observations.extend(plan.steps[index].execution_res or "" for index in pending)

    def _history_is_long(self) -> bool:
        """Hand over to a fresh run when the server suggests it, or past the configured length."""
        info = workflow.info()
        limit = self._state.config.continue_as_new_after_events
        return info.is_continue_as_new_suggested() or (limit is not None and info.get_current_history_length() > limit)

    def _continue_as_new(self, request: ResearchRequest, finished: list[str]) -> NoReturn:
        """Hand the whole state to a fresh run, with the findings of this batch's finished steps
        among its observations (the next run skips those steps)."""
        state = self._state.model_copy(update={"observations": self._state.observations + finished})
        workflow.continue_as_new(args=[request, RunContinuation(checkpoint=state,
                                                                written_by_run_id=workflow.info().run_id)])

    async def _run_step(self, request: ResearchRequest, index: int, context: set[int] | None = None) -> None:
        plan, locale = self._current_plan(), self._state.locale
        step = plan.steps[index]
        status = self._status.steps[index]
        status.state, status.started_at = StepState.RUNNING, workflow.now().isoformat()
        self._event("step_started", step.title, index)
        agent, tool_guidance = agent_for(step.step_type, has_resources=bool(request.resources),
                                         web=request.enable_web_search)
        async with self._slots.held():
            mcp_specs, mcp_routes = await mcp_tools_for(agent.name, request.mcp_servers)
        tools = ToolContext(max_search_results=request.max_search_results, resources=tuple(request.resources),
                            crawls=self._crawls, mcp_routes=mcp_routes, step_number=index + 1)
        finding = await run_agent(
            agent,
            {**self._prompt_vars(locale), "tool_guidance": tool_guidance},
            step_task(plan, step, locale, context, request.resources if "local_search_tool" in agent.tools else None),
            self._state.config.agent_recursion_limit,
            tools,
            self._status.usage,
            extra_tools=mcp_specs,
            slots=self._slots,
            max_tool_calls=self._state.config.max_tool_calls_per_turn,
        )
        step.execution_res = finding
        if step.step_type is StepType.RESEARCH and agent.tools and not tools.ran and workflow.patched(NO_SEARCH_PATCH):
            self._note(NO_SEARCH_NOTE.format(number=index + 1, title=step.title))
        status.state, status.finished_at = StepState.DONE, workflow.now().isoformat()
        status.finding_preview = finding[:300]
        self._event("step_done", step.title, index)

    async def _report(self, request: ResearchRequest) -> str:
        """The reporter's text, with what a reader must know about it at its top (no research
        needed, zero findings) and a mark where it was cut at the output cap."""
        self._set_phase(Phase.REPORTING)
        if not any(observation.strip() for observation in self._state.observations):
            self._note(ZERO_FINDINGS_NOTE)
        response = await chat(
            ChatRequest(
                prompt="reporter",
                prompt_vars={**self._prompt_vars(self._state.locale), "report_style": request.report_style.value},
                messages=reporter_messages(self._current_plan(), self._state.observations),
            ),
            self._status.usage,
            summary="reporter",
        )
        report = "".join(f"> **Note:** {note}\n\n" for note in self._status.notes) + response.message.content
        if response.truncated:
            cut = (f"The report was cut at the reporter's output cap of {response.output_cap} tokens "
                   "(LLM_AGENT_MAX_OUTPUT_TOKENS, reporter=…).")
            self._note(cut)
            report += f"\n\n> **Note:** {cut}"
        return report

    # ------------------------------------------------------------------ messages from people
    # Signals take their inputs untyped (``*inputs``), so no value (a number, nothing, two values)
    # can fail decoding: anything but one good, timely message is dropped and recorded as an
    # "ignored" event with the reason, which ``status``, ``watch`` and the Web UI show to its sender.

    @workflow.signal(name=Awaiting.PLAN_FEEDBACK.value)
    def plan_feedback(self, *inputs: object) -> None:
        """DeerFlow's protocol as a signal; a bad or ill-timed one never fails or wedges the run."""
        try:
            parsed = parse_feedback(one_input(inputs))
            self._ensure_awaiting(Awaiting.PLAN_FEEDBACK, self._feedback_inbox)
        except InvalidFeedback as error:
            self._ignore(Awaiting.PLAN_FEEDBACK, error)
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
        self._ensure_awaiting(Awaiting.PLAN_FEEDBACK, self._feedback_inbox)

    @workflow.signal(name=Awaiting.CLARIFICATION.value)
    def clarification_answer(self, *inputs: object) -> None:
        try:
            for value in inputs:  # a payload the worker could not decode says so first
                refuse_undecodable(value)
            self._ensure_awaiting(Awaiting.CLARIFICATION, self._clarification_inbox)
            self._clarification_inbox.append(nonempty_answer(one_input(inputs)))
        except InvalidFeedback as error:
            self._ignore(Awaiting.CLARIFICATION, error)

    @workflow.update(name=Awaiting.CLARIFICATION.value)
    def answer_clarification(self, answer: str) -> ReviewOutcome:
        self._clarification_inbox.append(nonempty_answer(answer))
        return ReviewOutcome(accepted=True, message="Answer received; the coordinator continues.")

    @answer_clarification.validator
    def _validate_answer(self, answer: str) -> None:
        nonempty_answer(answer)
        self._ensure_awaiting(Awaiting.CLARIFICATION, self._clarification_inbox)

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        return self._status

    # ------------------------------------------------------------------ helpers

    def _current_plan(self) -> Plan:
        plan = self._state.plan
        if plan is None:  # steps and the report come after a plan was adopted
            raise ApplicationError("No plan to run", type="InternalError", non_retryable=True)
        return plan

    def _use_config(self, config: RunConfig) -> None:
        self._state.config = config
        self._slots = ActivitySlots(config.max_activities_in_flight)

    def _ensure_awaiting(self, what: Awaiting, inbox: Sized) -> None:
        if self._status.awaiting is not what or inbox:
            raise InvalidFeedback(f"the run is not waiting for {what.value} (it is {self._status.phase.value})")

    def _ignore(self, signal: Awaiting, error: InvalidFeedback) -> None:
        workflow.logger.warning("Ignored %s: %s", signal.value, error)
        self._event("ignored", f"{signal.value}: {error}")

    def _await_person(self, phase: Phase, what: Awaiting, request: ResearchRequest) -> None:
        now = workflow.now()
        self._status.awaiting_since = now.isoformat()
        self._status.review_deadline = (now + request.review_timeout).isoformat()
        self._set_phase(phase, awaiting=what)

    def _prompt_vars(self, locale: str) -> dict[str, str]:
        return {"CURRENT_TIME": workflow.now().strftime("%a %b %d %Y %H:%M:%S %z"), "locale": locale}

    def _event(self, kind: str, message: str, step_index: int | None = None) -> None:
        events = self._status.events
        events.append(ProgressEvent(at=workflow.now().isoformat(), kind=kind,  # type: ignore[arg-type]
                                    message=message, step_index=step_index))
        if kind == "ignored":  # a flood of bad signals keeps only its latest few
            ignored = [index for index, event in enumerate(events) if event.kind == "ignored"]
            for index in reversed(ignored[:-MAX_IGNORED_EVENTS]):
                del events[index]
        del events[:-MAX_EVENTS]
        workflow.set_current_details(current_details(self._status))

    def _set_phase(self, phase: Phase, awaiting: Awaiting | None = None) -> None:
        self._status.phase = phase
        self._status.awaiting = awaiting
        if self._state.config.search_attributes_enabled:
            self._upsert_phase()
        self._event("phase", phase.value + (f" (awaiting {awaiting.value})" if awaiting else ""))
        count_phase(phase, self._status.outcome)

    def _upsert_phase(self) -> None:
        awaiting = self._status.awaiting
        workflow.upsert_search_attributes([PHASE.value_set(self._status.phase.value),
                                           AWAITING.value_set(awaiting.value if awaiting else "")])

    def _show_plan(self, plan: Plan, feedback: str | None) -> None:
        self._state.plan = self._status.plan = plan
        self._status.plan_history.append(
            PlanVersion(version=len(self._status.plan_history) + 1, plan=plan.model_copy(deep=True), feedback=feedback)
        )
        self._status.steps = [
            StepStatus(index=index, title=step.title, step_type=step.step_type,
                       state=StepState.DONE if step.execution_res is not None else StepState.PENDING)
            for index, step in enumerate(plan.steps)
        ]
        self._event("plan", f"Plan v{len(self._status.plan_history)}: {plan.title} ({len(plan.steps)} steps)")

    def _note(self, note: str) -> None:
        """Something a reader must know about the outcome: in status, events and the result."""
        if note not in self._status.notes:
            self._status.notes.append(note)
            self._event("note", note)

    def _finish(self, result: ResearchResult) -> ResearchResult:
        result.usage = self._status.usage
        result.notes = list(self._status.notes)
        self._status.outcome = result.outcome
        self._status.error = result.error
        self._set_phase(Phase.FAILED if result.outcome is Outcome.FAILED else Phase.COMPLETED)
        return result

    def _failed(self, error: ActivityError) -> ApplicationError:
        """The run's failure, said in its status and in the error it ends with."""
        failed_in = self._status.phase
        self._status.error = failure_message(error)
        self._status.outcome = Outcome.FAILED
        self._set_phase(Phase.FAILED)
        return ApplicationError(f"Research run failed while {failed_in.value}: {self._status.error}",
                                type="ResearchFailed", non_retryable=True)
