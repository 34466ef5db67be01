"""A worker interceptor that keeps this process's in-flight journal (hosting/inflight_journal.py).

Why an interceptor: every activity attempt passes through it, whatever its kind, so the journal
holds each attempt's task token from its start until it ends (completed, failed or cancelled);
what is left open when the process dies is exactly what it lost. It is registered first, so the
end is written after every other interceptor is done with the attempt. While it runs, what the
attempt carries to its next attempt (``carry`` in runtime/heartbeat.py) is noted too.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from hosting.inflight_journal import InflightJournal
from runtime.heartbeat import carried_details_sink


class InflightJournalInterceptor(Interceptor):
    def __init__(self, journal: InflightJournal) -> None:
        self.journal = journal

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _JournalInbound(next, self.journal)


class _JournalInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, journal: InflightJournal) -> None:
        super().__init__(next)
        self.journal = journal

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        entry = self.journal.opened(activity.info().task_token)
        sink = carried_details_sink.set(lambda details: self.journal.carried(entry, details))
        try:
            return await super().execute_activity(input)
        finally:
            carried_details_sink.reset(sink)
            self.journal.closed(entry)
