"""What the reporter's turn needs beyond the findings it reads, from the worker's settings: handed to
each run by ``load_run_config`` (``ReportReserve``), whose budget keeps that much free before every
research step (workflows/research/report_reserve.py).

Estimated once per run, not per check: the prompt (its longest style, since the run's is not asked)
and the fixed messages counted as the context budget counts a request, the reply at the reporter's
output cap, and the price of the model its turn goes to.
"""

from __future__ import annotations

from activities.model.context_budget import count_request_tokens, script_weights_for
from activities.model.output_caps import output_cap
from activities.model.prompts import render_prompt
from config.settings import Settings
from workflows.contracts.budget import ReportReserve
from workflows.contracts.chat import ChatRequest
from workflows.contracts.plan import Plan
from workflows.contracts.report_style import ReportStyle
from workflows.research.messages import reporter_messages

# A stand-in for the reporter's time variable, as long as the one the workflow renders.
SAMPLE_TIME = "Mon Jan 01 2029 00:00:00 +0000"


def report_reserve(settings: Settings) -> ReportReserve:
    request = ChatRequest(prompt="reporter", messages=reporter_messages(Plan(title=""), []))
    model = settings.model_name(request.model_tier.value)
    weights = script_weights_for(model)
    prompt_tokens = max(
        count_request_tokens(render_prompt(request.prompt, {"CURRENT_TIME": SAMPLE_TIME, "locale": "en-US",
                                                            "report_style": style.value}),
                             request.messages, 0, weights)
        for style in ReportStyle)
    return ReportReserve(prompt_tokens=prompt_tokens, output_tokens=output_cap(settings, request),
                         price=settings.price_quote(model))
