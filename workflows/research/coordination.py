"""The run's opening, before the planner: the run config, the coordinator (with its clarifying
questions, when enabled) and the background investigation."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from workflows.calls.activity_options import LOAD_RUN_CONFIG, execute
    from workflows.calls.errors import failure_message
    from workflows.calls.model_calls import call_model
    from workflows.calls.side_by_side import together
    from workflows.contracts.chat import ChatMessage, ChatRequest
    from workflows.contracts.research import Outcome, ResearchResult
    from workflows.contracts.run_config import RunConfig
    from workflows.contracts.status import Awaiting, Phase
    from workflows.research.messages import background_message, clarified_task
    from workflows.research.research_run import ResearchRun, ReviewTimedOut, RunEnded
    from workflows.research.run_state import DEFAULT_LOCALE
    from workflows.research.tools import ASK_CLARIFICATION, HANDOFF_TO_PLANNER, search
    from workflows.research.visibility import REPORT_STYLE

# A run without resources loads its config beside the coordinator's first turn, not before it.
CONCURRENT_CONFIG_PATCH = "concurrent-run-config"
DIRECT_REPLY_NOTE = ("Direct reply: the coordinator answered without handing off to research "
                     "(no plan, no search). A model that never calls tools ends here.")
CLARIFICATION_LIMIT_REACHED = (
    "You have asked enough clarifying questions. Do not ask another: hand the request off to the "
    "planner now with `handoff_to_planner`, using everything the user has said."
)


async def configure_and_coordinate(run: ResearchRun) -> str:
    """The run config, then the coordinator; or both at once when the config cannot refuse the
    run (no resources to check) and the coordinator does not need it. One workflow-task
    round trip less before the background search: both are scheduled by the first task. (The
    coordinator's call then goes on the model queue: the config that would put it on the
    main queue, ``RunConfig.main_queue_kinds``, has not arrived yet.) Returns the research topic."""
    if run.request.resources or not workflow.patched(CONCURRENT_CONFIG_PATCH):
        await configure(run)
        return await _coordinate(run)
    _, topic = await together(configure(run, concurrent=True), _coordinate(run))
    return topic


async def configure(run: ResearchRun, concurrent: bool = False) -> None:
    # It also refuses resources outside the worker's resource roots (input only: no new command).
    run.use_config(await execute(LOAD_RUN_CONFIG, list(run.request.resources), RunConfig, routing=run.routing))
    if run.state.config.search_attributes_enabled:
        workflow.upsert_search_attributes([REPORT_STYLE.value_set(run.request.report_style.value)])
        if concurrent:  # the phase was set before the config said the attributes exist
            run.state.upsert_phase()


async def _coordinate(run: ResearchRun) -> str:
    """Coordinator turns, ending in a handoff to the planner (the research topic is returned)
    or in a direct reply, which ends the run.

    With clarification enabled the coordinator may ask the user questions first; at the
    round limit it must hand off, and the whole exchange is what the planner sees.
    """
    request, state = run.request, run.state
    state.enter(Phase.COORDINATING)
    conversation = [ChatMessage(role="user", content=request.question)]
    rounds = 0
    while True:
        may_ask = request.enable_clarification and rounds < request.max_clarification_rounds
        at_limit = request.enable_clarification and not may_ask
        reply = await call_model(
            ChatRequest(
                prompt="coordinator",
                prompt_vars=run.prompt_vars(request.locale or "the language of the user's message"),
                messages=conversation + ([ChatMessage(role="user", name="system",
                                                      content=CLARIFICATION_LIMIT_REACHED)] if at_limit else []),
                tools=[HANDOFF_TO_PLANNER, ASK_CLARIFICATION] if may_ask else [HANDOFF_TO_PLANNER],
            ),
            state.status.usage,
            summary="coordinator",
            routing=run.routing,
        )
        calls = {call.name: call for call in reply.tool_calls}
        handoff = calls.get(HANDOFF_TO_PLANNER.name)
        question = calls.get(ASK_CLARIFICATION.name)
        if handoff is None and question is not None and may_ask:
            asked = str(question.arguments.get("question") or reply.content or "Could you say more?")
            try:
                answer = await _await_clarification(run, asked)
            except ReviewTimedOut:
                state.record("clarification", "No answer in time: researching what was asked so far.")
                return _handoff(run, None, conversation)
            conversation += [ChatMessage(role="assistant", content=asked), ChatMessage(role="user", content=answer)]
            rounds += 1
            state.status.clarification_rounds = rounds
            continue
        if handoff is None and rounds == 0:
            state.note(DIRECT_REPLY_NOTE)
            raise RunEnded(ResearchResult(report=reply.content, locale=request.locale or DEFAULT_LOCALE,
                                          outcome=Outcome.DIRECT_REPLY))
        return _handoff(run, handoff.arguments if handoff else None, conversation)


async def _await_clarification(run: ResearchRun, question: str) -> str:
    """The person's answer to ``question`` (recorded with who gave it)."""
    state, answers = run.state, run.inbox.clarifications
    state.status.question = question
    run.await_person(Phase.AWAITING_CLARIFICATION, Awaiting.CLARIFICATION)
    state.record("clarification", f"Asked: {question}")
    await run.wait_for_person(lambda: bool(answers), "clarification deadline")
    state.status.question = None
    answer = answers.pop(0)
    state.decide("clarification", f"Answered: {answer.text}", answer.by)
    state.enter(Phase.COORDINATING)
    return answer.text


def _handoff(run: ResearchRun, arguments: dict | None, conversation: list[ChatMessage]) -> str:
    """Start the planner's conversation from the (clarified) request; returns the research topic."""
    arguments = arguments or {}
    task = clarified_task(conversation)
    run.state.locale = run.request.locale or str(arguments.get("locale") or DEFAULT_LOCALE)
    run.state.planner_messages = [task]
    return str(arguments.get("research_topic") or task.content)


async def investigate(run: ResearchRun, topic: str) -> None:
    """A quick search before planning; a failure only costs the planner some context."""
    if not (run.request.enable_background_investigation and run.request.enable_web_search):
        return
    run.state.enter(Phase.BACKGROUND_INVESTIGATION)
    try:
        response = await search(topic, run.request.max_search_results, run.routing)
    except ActivityError as error:
        workflow.logger.warning("Background investigation failed: %s", failure_message(error))
        run.state.record("error", f"Background investigation failed: {failure_message(error)}")
        return
    run.state.planner_messages.append(background_message(response))
