"""The step loop: every unfinished step of the plan, each by its agent, in order (DeerFlow) or as
their dependencies allow; a long run hands over to a fresh one between steps."""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.calls.side_by_side import together
    from workflows.contracts.plan import Plan, StepType
    from workflows.contracts.status import Phase, StepState
    from workflows.contracts.usage import COST_DIGITS, Counted, Usage
    from workflows.research.agent_loop import run_agent
    from workflows.research.agents import agent_for
    from workflows.research.budget import within_budget
    from workflows.research.findings import finding_preview
    from workflows.research.found_urls import FoundUrls, background_urls, task_urls
    from workflows.research.messages import step_task
    from workflows.research.research_run import ResearchRun
    from workflows.research.run_state import RunContinuation
    from workflows.research.scheduling import step_dependencies
    from workflows.research.tools import ToolContext, mcp_tools_for

# A research step whose agent ran no tool (a model that never calls them) says so (issue #24).
NO_SEARCH_PATCH = "no-search-note"
# A step's cost is its own calls' (issue #48 item 4): parallel runs recorded before counted the run's
# usage while the step ran, its siblings' calls included. Serial runs add up alike either way.
OWN_STEP_USAGE_PATCH = "own-step-usage"
# A step's background search results count as found (issue #42 §7): runs recorded before found only the
# question's and the plan's URLs before the step's own tools returned, and refused a crawl of the others.
BACKGROUND_URLS_PATCH = "background-urls-found"
NO_SEARCH_NOTE = ("Research step {number} ({title}) made no search: the researcher called no tool, so its "
                  "findings rest on the model's own knowledge.")


async def run_steps(run: ResearchRun) -> None:
    """Run every unfinished step of the plan: in order (DeerFlow), or as their dependencies allow."""
    plan = run.current_plan()
    run.state.enter(Phase.RESEARCHING)
    pending = [index for index, step in enumerate(plan.steps) if step.execution_res is None]
    if run.request.parallel_steps:
        finished: set[int] = set(range(len(plan.steps))) - set(pending)

        async def run_when_ready(index: int) -> None:
            needs = step_dependencies(plan, index)
            await workflow.wait_condition(lambda: needs <= finished)
            if await within_budget(run, len(pending) - len(finished)):
                await _run_step(run, index, context=needs)
            finished.add(index)

        await together(*(run_when_ready(index) for index in pending))
    else:
        for position, index in enumerate(pending):
            if _history_is_long(run):
                _continue_as_new(run, [plan.steps[i].execution_res or "" for i in pending
                                       if plan.steps[i].execution_res])
            if not await within_budget(run, len(pending) - position):
                break
            await _run_step(run, index)
    # Observations keep plan order, however the steps interleaved.
    run.state.observations.extend(plan.steps[index].execution_res or "" for index in pending
                                  if plan.steps[index].execution_res is not None)  # not those cut at the budget


def _history_is_long(run: ResearchRun) -> bool:
    """Hand over to a fresh run when the server suggests it, or past the configured length."""
    info = workflow.info()
    limit = run.state.config.continue_as_new_after_events
    return info.is_continue_as_new_suggested() or (limit is not None and info.get_current_history_length() > limit)


def _continue_as_new(run: ResearchRun, finished: list[str]) -> NoReturn:
    """Hand the whole state to a fresh run, with the findings of this batch's finished steps
    among its observations (the next run skips those steps). The request goes as the first
    argument, as the run itself was started."""
    state = run.state.model_copy(update={"observations": run.state.observations + finished})
    continuation = RunContinuation(checkpoint=state, written_by_run_id=workflow.info().run_id)
    workflow.continue_as_new(args=[run.request, continuation])


async def _run_step(run: ResearchRun, index: int, context: set[int] | None = None) -> None:
    request, state = run.request, run.state
    plan, locale = run.current_plan(), state.report_locale
    step = plan.steps[index]
    status = state.status.steps[index]
    status.state, status.started_at = StepState.RUNNING, workflow.now().isoformat()
    state.record("step_started", step.title, index)
    before, own = Usage(total_tokens=state.status.usage.total_tokens, cost_usd=state.status.usage.cost_usd), Usage()
    agent, tool_guidance = agent_for(step.step_type, has_resources=bool(request.resources),
                                     web=request.enable_web_search)
    async with run.slots.held():
        mcp_specs, mcp_routes = await mcp_tools_for(agent.name, request.mcp_servers, run.routing)
    tools = ToolContext(max_search_results=request.max_search_results, resources=tuple(request.resources),
                        crawls=run.crawls, found=_found_before_the_step(run, plan), mcp_routes=mcp_routes,
                        step_number=index + 1, routing=run.routing)
    finding = await run_agent(
        agent,
        {**run.prompt_vars(locale), "tool_guidance": tool_guidance},
        step_task(plan, step, locale, context, request.resources if "local_search_tool" in agent.tools else None),
        state.config.agent_recursion_limit,
        tools,
        Counted(run=state.status.usage, part=own),
        extra_tools=mcp_specs,
        slots=run.slots,
        max_tool_calls=state.config.max_tool_calls_per_turn,
    )
    step.execution_res = finding
    if step.step_type is StepType.RESEARCH and agent.tools and not tools.ran and workflow.patched(NO_SEARCH_PATCH):
        state.note(NO_SEARCH_NOTE.format(number=index + 1, title=step.title))
    status.state, status.finished_at = StepState.DONE, workflow.now().isoformat()
    status.finding_preview = finding_preview(finding)
    _count_step(run, own, before)
    state.record("step_done", step.title, index)
    state.publish_usage()


def _found_before_the_step(run: ResearchRun, plan: Plan) -> FoundUrls:
    """What a step has found before its tools return: the background investigation's results (found
    first), then the URLs of the question and the plan (workflows/research/found_urls.py)."""
    background = background_urls(run.state.planner_messages)
    if background and not workflow.patched(BACKGROUND_URLS_PATCH):
        background = []
    return FoundUrls([*background, *task_urls(run.request.question, plan)])


def _count_step(run: ResearchRun, own: Usage, before: Usage) -> None:
    """What the step cost, for the budget's expectations: its own calls (``own``); in a parallel run
    recorded before ``OWN_STEP_USAGE_PATCH``, the run's usage since ``before``, as it then counted."""
    budget, usage = run.state.status.budget, run.state.status.usage
    if budget is None:
        return
    if run.request.parallel_steps and not workflow.patched(OWN_STEP_USAGE_PATCH):
        own = Usage(total_tokens=usage.total_tokens - before.total_tokens,
                    cost_usd=round(usage.cost_usd - before.cost_usd, COST_DIGITS))
    budget.step_tokens.append(own.total_tokens)
    budget.step_costs_usd.append(own.cost_usd)
    budget.step_output_tokens.append(own.output_tokens)
