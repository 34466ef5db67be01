"""Custom search attributes: what the Web UI and ``starter.py list`` can filter runs by.

The worker registers them where it may; a run upserts them only when the worker reports them
registered (``RunConfig.search_attributes_enabled``), so a namespace without them still works.
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, TypedSearchAttributes

PHASE = SearchAttributeKey.for_keyword("DeerFlowPhase")
AWAITING = SearchAttributeKey.for_keyword("DeerFlowAwaiting")
REPORT_STYLE = SearchAttributeKey.for_keyword("DeerFlowReportStyle")
# A fork's source (its workflow id): ``DeerFlowForkedFrom = 'ID'`` lists the forks of a run.
FORKED_FROM = SearchAttributeKey.for_keyword("DeerFlowForkedFrom")

ALL_KEYS: tuple[SearchAttributeKey[str], ...] = (PHASE, AWAITING, REPORT_STYLE, FORKED_FROM)


def indexed_place(attributes: TypedSearchAttributes) -> tuple[str | None, str | None]:
    """Where the server's index has a run: its phase and what it awaits (None where not set). What a
    view shows of a run no worker answers for; anyone who may start runs may set these values."""
    return attributes.get(PHASE), attributes.get(AWAITING) or None
