"""The planner's turn, and making its reply the run's plan: an unusable plan (not JSON even after
repair, no title, no steps, cut at the output cap) is re-asked once, quoting the error."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.calls.model_calls import chat
    from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse, ModelTier
    from workflows.contracts.plan import Plan
    from workflows.contracts.research import Outcome, ResearchResult
    from workflows.contracts.status import Phase
    from workflows.research.messages import observation_message
    from workflows.research.plan_parsing import PlanParseError, parse_plan, require_steps
    from workflows.research.research_run import ResearchRun, RunEnded

# An unusable plan (bad JSON, no title, no steps) gets one re-ask quoting the error (issue #11).
PLAN_REASK_PATCH = "plan-reask"
# The chat activity mends a plan that is not quite JSON; runs recorded before mended it here, with
# json-repair, whose time on hostile text grows with its nesting (issue #42 §1).
PLAN_MENDED_PATCH = "plan-mended-by-chat"


async def usable_plan(run: ResearchRun, feedback: str | None) -> tuple[ChatMessage, Plan | None]:
    """The planner's reply and its plan, now the run's. An unusable plan is re-asked once; if that
    fails too, a first plan ends the run and a later one leaves the run to report from what it
    knows (None)."""
    response = await _plan(run)
    try:
        return response.message, _adopt_plan(run, response, feedback)
    except PlanParseError as error:
        if not workflow.patched(PLAN_REASK_PATCH):
            return response.message, _plan_unusable(run, error)
        run.state.record("error", f"Planner output unusable, asking again: {error}")
        reask = [ChatMessage(role="assistant", content=response.message.content),
                 ChatMessage(role="user", name="system", content=(
                     f"Your plan could not be used: {error}. Answer again with one JSON object that "
                     "follows the plan schema: a title and at least one step, each with a title."))]
        response = await _plan(run, reask)
        try:
            return response.message, _adopt_plan(run, response, feedback)
        except PlanParseError as again:
            return response.message, _plan_unusable(run, again)


async def _plan(run: ResearchRun, reask: list[ChatMessage] | None = None) -> ChatResponse:
    request, state = run.request, run.state
    state.enter(Phase.PLANNING)
    vars_ = {**run.prompt_vars(state.report_locale), "max_step_num": str(request.max_step_num)}
    tier = ModelTier.REASONING if request.enable_deep_thinking else ModelTier.BASIC
    observations = [observation_message(observation) for observation in state.observations]
    return await chat(
        ChatRequest(prompt="planner", prompt_vars=vars_,
                    messages=state.planner_messages + observations + (reask or []),
                    model_tier=tier, json_mode=True, response_schema="plan"),
        state.status.usage,
        summary=f"planner · v{len(state.status.plan_history) + 1}" + (" · re-ask" if reask else ""),
        routing=run.routing,
    )


def _adopt_plan(run: ResearchRun, response: ChatResponse, feedback: str | None) -> Plan:
    """The planner's plan, now the run's; raises ``PlanParseError`` for an unusable one."""
    try:
        plan = parse_plan(response.message.content, run.request.max_step_num, run.state.report_locale,
                          repair=not workflow.patched(PLAN_MENDED_PATCH))
    except PlanParseError as error:
        if response.truncated:
            raise PlanParseError(f"{error} (the reply was cut at the output cap of "
                                 f"{response.output_cap} tokens: write a shorter plan)") from error
        raise
    if not plan.steps and workflow.patched(PLAN_REASK_PATCH):
        require_steps(plan)
    run.state.show_plan(plan, feedback)
    return plan


def _plan_unusable(run: ResearchRun, error: PlanParseError) -> None:
    """An unusable first plan ends the run; a later one leaves the run to report (None)."""
    workflow.logger.warning("Planner output unusable: %s", error)
    run.state.record("error", f"Planner output unusable: {error}")
    if run.state.plan_iterations == 0:
        raise RunEnded(ResearchResult(
            report=f"The planner did not produce a usable plan: {error}", locale=run.state.report_locale,
            outcome=Outcome.FAILED, error=f"The planner did not produce a usable plan: {error}",
        )) from None
