"""Custom search attributes: what the Web UI, ``starter.py list`` and the API filter runs by.

Two kinds. The run upserts its phase, what it awaits, its report style (a fork its source) as it goes, only when
the worker reports them registered (``RunConfig.search_attributes_enabled``), so a namespace
without them still works. Who started the run and its question are set by the client that starts
it (runtime/research_client.py), which leaves out those the namespace lacks: a run never depends
on them, and a run started before they existed is still listed (without them).
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, TypedSearchAttributes

PHASE = SearchAttributeKey.for_keyword("DeerFlowPhase")
AWAITING = SearchAttributeKey.for_keyword("DeerFlowAwaiting")
REPORT_STYLE = SearchAttributeKey.for_keyword("DeerFlowReportStyle")
# A fork's source (its workflow id): ``DeerFlowForkedFrom = 'ID'`` lists the forks of a run.
FORKED_FROM = SearchAttributeKey.for_keyword("DeerFlowForkedFrom")
STARTED_BY = SearchAttributeKey.for_keyword("DeerFlowStartedBy")  # runtime/run_memo.py: "api:alice"
QUESTION = SearchAttributeKey.for_text("DeerFlowQuestion")  # full text: a filter matches its words

UPSERTED_KEYS: tuple[SearchAttributeKey[str], ...] = (PHASE, AWAITING, REPORT_STYLE, FORKED_FROM)
START_KEYS: tuple[SearchAttributeKey[str], ...] = (STARTED_BY, QUESTION)
ALL_KEYS: tuple[SearchAttributeKey[str], ...] = UPSERTED_KEYS + START_KEYS


def indexed_place(attributes: TypedSearchAttributes) -> tuple[str | None, str | None]:
    """Where the server's index has a run: its phase and what it awaits (None where not set). What a
    view shows of a run no worker answers for; anyone who may start runs may set these values."""
    return attributes.get(PHASE), attributes.get(AWAITING) or None



# The memo key under which a run keeps what it has spent so far (its ``Usage``), upserted with its
# phase: a listing carries memos, so ``list``, ``costs`` and the page read spend without a query per run.
USAGE_MEMO = "usage"
