"""A person's review of the plan: a durable wait for ``plan_feedback`` / ``review_plan``, bounded
by ``review_timeout``, after which ``review_timeout_action`` decides."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.research import Outcome, ResearchResult, ReviewTimeoutAction
    from workflows.contracts.status import Awaiting, Phase
    from workflows.research.research_run import ResearchRun, ReviewTimedOut, RunEnded
    from workflows.research.review import Feedback

# Runs recorded before review deadlines existed waited without a timer; replaying them must too.
REVIEW_DEADLINE_PATCH = "review-deadline"


async def review(run: ResearchRun) -> Feedback | None:
    """A person's verdict on the plan. Past ``review_timeout``, ``review_timeout_action``
    decides: ``accept`` (the plan runs), ``report`` (None: the report is written from what is
    known) or ``cancel`` (the run ends, saying so)."""
    try:
        return await _await_review(run)
    except ReviewTimedOut:
        request = run.request
        action = request.review_timeout_action
        run.state.record("review", f"No review within {request.review_timeout}: {action.value}")
        if action is ReviewTimeoutAction.CANCEL:
            raise RunEnded(ResearchResult(
                report=(f"The plan was not reviewed within {request.review_timeout}, so the run "
                        "was cancelled without researching (review_timeout_action=cancel)."),
                plan=run.state.plan, locale=run.state.report_locale, outcome=Outcome.CANCELLED,
            )) from None
        return None if action is ReviewTimeoutAction.REPORT else Feedback(accepted=True)


async def _await_review(run: ResearchRun) -> Feedback:
    inbox = run.inbox.feedback
    run.await_person(Phase.AWAITING_REVIEW, Awaiting.PLAN_FEEDBACK)
    if workflow.patched(REVIEW_DEADLINE_PATCH):
        await run.wait_for_person(lambda: bool(inbox), "plan review deadline")
    else:
        await workflow.wait_condition(lambda: bool(inbox))
    feedback = inbox.pop(0)
    run.state.decide("plan_review", feedback.as_message, feedback.by)
    return feedback
