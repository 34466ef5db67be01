"""``measure_report``: DeerFlow's metrics of a report a request sent (workflows/contracts/report_metrics.py).

An activity because the report is anybody's text, up to the operator's content cap: scoring it in
the workflow would hold the worker's workflow thread (and, for a run's replay, again each time)
for as long as the text takes. The regular expressions run in a thread, so the worker's event loop
keeps beating between them.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from workflows.contracts.evaluation import MeasuredReport, MeasureRequest, measure


@activity.defn(name="measure_report")
async def measure_report(request: MeasureRequest) -> MeasuredReport:
    return await asyncio.to_thread(measure, request)
