"""``DeepResearchWorkflow``: DeerFlow's research pipeline as one durable, replayable workflow.

coordinator -> background investigation -> planner <-> human review -> step loop -> reporter

The workflow only decides; every model call, search, crawl and Python run is an activity. A
human review is a durable wait on a signal or update, so a run can sit paused for days and
survive worker and server restarts.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.agent_loop import run_agent
    from workflows.agents import AGENT_FOR_STEP, RESEARCHER_TOOL_GUIDANCE
    from workflows.errors import failure_message
    from workflows.messages import background_message, observation_message, reporter_messages, step_task
    from workflows.model_calls import call_model
    from workflows.models import (
        WORKFLOW_TYPE,
        ChatMessage,
        ChatRequest,
        ModelTier,
        Outcome,
        Phase,
        Plan,
        ResearchRequest,
        ResearchResult,
        ReviewOutcome,
        RunConfig,
        RunStatus,
        StepState,
        StepStatus,
    )
    from workflows.plan_parsing import PlanParseError, parse_plan
    from workflows.review import Feedback, InvalidFeedback, parse_feedback
    from workflows.tools import HANDOFF_TO_PLANNER, ToolContext, search

AWAITING_PLAN_FEEDBACK = "plan_feedback"
DEFAULT_LOCALE = "en-US"


@workflow.defn(name=WORKFLOW_TYPE)
class DeepResearchWorkflow:
    def __init__(self) -> None:
        self._status = RunStatus(phase=Phase.STARTING)
        self._feedback_inbox: list[Feedback] = []
        self._observations: list[str] = []

    # ------------------------------------------------------------------ the story of a run

    @workflow.run
    async def run(self, request: ResearchRequest) -> ResearchResult:
        try:
            return await self._research(request)
        except ActivityError as error:
            # A model call that failed for good (bad key, provider down past all retries).
            failed_in = self._status.phase
            self._set_phase(Phase.FAILED)
            self._status.error = failure_message(error)
            raise ApplicationError(
                f"Research run failed while {failed_in.value}: {self._status.error}",
                type="ResearchFailed", non_retryable=True,
            ) from error

    async def _research(self, request: ResearchRequest) -> ResearchResult:
        config = await workflow.execute_activity(
            "load_run_config", result_type=RunConfig, start_to_close_timeout=timedelta(seconds=30)
        )
        self._status.offline_demo = config.offline_demo
        handoff = await self._coordinate(request)
        if isinstance(handoff, str):
            return self._finish(ResearchResult(report=handoff, locale=request.locale or DEFAULT_LOCALE,
                                               outcome=Outcome.DIRECT_REPLY))
        topic, locale = handoff
        self._status.locale = locale

        planner_messages = [ChatMessage(role="user", content=request.question)]
        if request.enable_background_investigation:
            planner_messages.extend(await self._investigate(topic, request))

        plan: Plan | None = None
        plan_iterations = 0
        while plan_iterations < request.max_plan_iterations:
            reply = await self._plan(request, locale, planner_messages)
            try:
                plan = parse_plan(reply.content, request.max_step_num, locale)
            except PlanParseError as error:
                workflow.logger.warning("Planner output unusable: %s", error)
                if plan_iterations == 0:
                    return self._finish(ResearchResult(
                        report=f"The planner did not produce a usable plan: {error}", locale=locale,
                        outcome=Outcome.FAILED, error=str(error), usage=self._status.usage,
                    ))
                break  # later iterations write the report from what is known
            self._show_plan(plan)
            if plan.has_enough_context:
                break
            if not request.auto_accept_plan:
                feedback = await self._await_review()
                if not feedback.accepted:
                    planner_messages.append(ChatMessage(role="assistant", content=reply.content))
                    planner_messages.append(ChatMessage(role="user", name="feedback", content=feedback.as_message))
                    continue
            plan_iterations += 1
            self._status.plan_iterations = plan_iterations
            await self._run_steps(plan, locale, request, config)

        assert plan is not None  # the loop runs at least once and every exit above sets it
        report = await self._report(plan, locale, request)
        return self._finish(ResearchResult(report=report, plan=plan, locale=locale, usage=self._status.usage))

    # ------------------------------------------------------------------ nodes

    async def _coordinate(self, request: ResearchRequest) -> str | tuple[str, str]:
        """One coordinator turn: a direct reply (str) or a handoff (topic, locale)."""
        self._set_phase(Phase.COORDINATING)
        reply = await call_model(
            ChatRequest(
                prompt="coordinator",
                prompt_vars=self._prompt_vars(request.locale or "the language of the user's message"),
                messages=[ChatMessage(role="user", content=request.question)],
                tools=[HANDOFF_TO_PLANNER],
            ),
            self._status.usage,
        )
        handoff = next((call for call in reply.tool_calls if call.name == HANDOFF_TO_PLANNER.name), None)
        if handoff is None:
            return reply.content
        topic = str(handoff.arguments.get("research_topic") or request.question)
        locale = request.locale or str(handoff.arguments.get("locale") or DEFAULT_LOCALE)
        return topic, locale

    async def _investigate(self, topic: str, request: ResearchRequest) -> list[ChatMessage]:
        """A quick search before planning; a failure only costs the planner some context."""
        self._set_phase(Phase.BACKGROUND_INVESTIGATION)
        try:
            response = await search(topic, request.max_search_results)
        except ActivityError as error:
            workflow.logger.warning("Background investigation failed: %s", failure_message(error))
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

    async def _await_review(self) -> Feedback:
        self._set_phase(Phase.AWAITING_REVIEW, awaiting=AWAITING_PLAN_FEEDBACK)
        await workflow.wait_condition(lambda: bool(self._feedback_inbox))
        self._status.awaiting = None
        return self._feedback_inbox.pop(0)

    async def _run_steps(self, plan: Plan, locale: str, request: ResearchRequest, config: RunConfig) -> None:
        self._set_phase(Phase.RESEARCHING)
        tool_context = ToolContext(max_search_results=request.max_search_results)
        for index, step in enumerate(plan.steps):
            if step.execution_res is not None:
                continue
            status = self._status.steps[index]
            status.state, status.started_at = StepState.RUNNING, workflow.now().isoformat()
            finding = await run_agent(
                AGENT_FOR_STEP[step.step_type],
                {**self._prompt_vars(locale), "tool_guidance": RESEARCHER_TOOL_GUIDANCE},
                step_task(plan, step, locale),
                config.agent_recursion_limit,
                tool_context,
                self._status.usage,
            )
            step.execution_res = finding
            self._observations.append(finding)
            status.state, status.finished_at = StepState.DONE, workflow.now().isoformat()
            status.finding_preview = finding[:300]

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
            self._ensure_review_pending()
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
        self._ensure_review_pending()

    @workflow.query(name="status")
    def status(self) -> RunStatus:
        return self._status

    # ------------------------------------------------------------------ helpers

    def _ensure_review_pending(self) -> None:
        if self._status.awaiting != AWAITING_PLAN_FEEDBACK or self._feedback_inbox:
            raise InvalidFeedback(f"no plan review is pending (the run is {self._status.phase.value})")

    def _prompt_vars(self, locale: str) -> dict[str, str]:
        return {"CURRENT_TIME": workflow.now().strftime("%a %b %d %Y %H:%M:%S %z"), "locale": locale}

    def _set_phase(self, phase: Phase, awaiting: str | None = None) -> None:
        self._status.phase = phase
        self._status.awaiting = awaiting

    def _show_plan(self, plan: Plan) -> None:
        self._status.plan = plan
        self._status.steps = [
            StepStatus(index=index, title=step.title, step_type=step.step_type,
                       state=StepState.DONE if step.execution_res is not None else StepState.PENDING)
            for index, step in enumerate(plan.steps)
        ]

    def _finish(self, result: ResearchResult) -> ResearchResult:
        result.usage = self._status.usage
        self._set_phase(Phase.FAILED if result.outcome is Outcome.FAILED else Phase.COMPLETED)
        self._status.error = result.error
        return result
