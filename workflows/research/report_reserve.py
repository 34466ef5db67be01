"""The reporter's reserve: what a run's budget keeps free before each research step, so that the
report written when the research ends (a person's "finish now", the timeout's, or the last step
done) stays within the budget, and what a pause says finishing now will cost (issue #48 item 3:
"finish now" wrote "$1.20 of $1.10").

The report reads its prompt, the plan and every finding, and writes its reply. The reply is
reserved at the reporter's output cap, the most it can be; a finding at the output tokens of the
step that wrote it (it is that step's last reply, so its replies bound it); the plan at a token a
character, which no tokenizer exceeds for text; all of it priced as the reporter's model is. The
worker's settings give the prompt, the cap and the price (``ReportReserve``, from ``load_run_config``);
a run whose config has none (recorded before the reserve) keeps none, and replays as it ran.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.budget import RunBudget
    from workflows.research.research_run import ResearchRun


def report_cost(run: ResearchRun, budget: RunBudget, findings_to_come: int = 0) -> tuple[int, float]:
    """The most the report is expected to cost, in tokens and USD, reading the findings of the steps
    done and ``findings_to_come`` tokens more; nothing for a run without a reserve."""
    reserve = run.state.config.report_reserve
    if reserve is None:
        return 0, 0.0
    plan = run.current_plan()
    reading = (reserve.prompt_tokens + len(plan.title) + len(plan.thought) + sum(budget.step_output_tokens)
               + findings_to_come)
    cost = reserve.price.cost_usd(reading, 0, reserve.output_tokens) if reserve.price is not None else 0.0
    return reading + reserve.output_tokens, cost
