"""What a content flow's model calls used, where ``starter.py costs`` reads it, whatever the flow's end.

Why: the chat activity counts every call in the ``deerflow_llm_cost_microusd`` metric, but ``costs``
read research runs only, so the prose writer, the report judge, the slide composer, the podcast's
script writer and the prompt enhancer were on the dashboard and not in ``costs`` (issue #48 item 5:
$10.20 against $10.00). Each flow keeps its usage on itself (``CountedFlow``): its result carries it,
and the ``usage`` query answers it for a flow that ended without one (failed, timed out), as the
``status`` query does for a research run.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contracts.enhance import ENHANCER_WORKFLOW
    from workflows.contracts.evaluation import EVALUATOR_WORKFLOW
    from workflows.contracts.podcast import PODCAST_WORKFLOW
    from workflows.contracts.prose import PROSE_WORKFLOW
    from workflows.contracts.slides import SLIDES_WORKFLOW
    from workflows.contracts.usage import Usage

USAGE_QUERY = "usage"
# The flows that call the model, by workflow type, as ``costs`` names them.
COUNTED_FLOWS = {PROSE_WORKFLOW: "prose writer", EVALUATOR_WORKFLOW: "report evaluation",
                 SLIDES_WORKFLOW: "slide composer", PODCAST_WORKFLOW: "podcast",
                 ENHANCER_WORKFLOW: "prompt enhancer"}


class CountedFlow:
    """The base of a content flow that calls the model: its calls add to ``self.usage``."""

    def __init__(self) -> None:
        self.usage = Usage()

    @workflow.query(name=USAGE_QUERY)
    def spent(self) -> Usage:
        return self.usage
