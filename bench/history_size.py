"""History size: how many bytes a run leaves in Temporal's history, with and without the claim-check store.

Run from the repository root: ``.venv/bin/python bench/history_size.py`` (about 4 minutes).

Why it is measured this way: Temporal caps a history at 50 MB and a payload at 2 MB, and every
byte of history is re-read on replay and on every cache miss, so size is a cost even far below
the caps. Sizes are the sum of ``event.ByteSize()`` (and the length of ``history.to_json()``);
every payload in every event is walked to find the largest one kept inline and to count
whole-payload claim-check references.

Two measurements, each an A/B in one invocation:

- **Plan-size series** (issue #12's target: at most 4 KiB of history per model call at 12 steps,
  growing linearly). Default runs (offline fake model, bundled corpus, auto-accepted) with
  ``max_step_num`` 3, 6 and 12 (the fake planner writes exactly that many steps; the run's plan is
  checked), on the default store with content-addressed subtrees (storage/subtrees.py) and with
  them off (``DEERFLOW_SUBTREES=false``, whole-payload offloading only, as before). Each row: history
  bytes, model calls (completed ``chat`` activities), history bytes per model call, and the bytes
  the run added to the blob store. Linear means the bytes per model call stay flat as the plan grows.
  Subtrees shrink activity payloads only (workflow-level ones stay readable by the plain ``temporal``
  CLI), so the run's result, the report, stays inline until it passes the 32 KiB whole-payload
  threshold: the rows also give the figure without the completion event, which shows the growth of
  the rest without that step.
- **Default and crawl-heavy rows** per store: a default run (3 steps) and a crawl-heavy run where
  search returns 20 loopback pages of about 1 MB each, which the researcher reads in full
  (``max_search_results=20``, ``max_step_num=2``: both research steps find the same 20 pages), on
  the filesystem store (threshold 32 KiB, subtrees on) and ``DEERFLOW_PAYLOAD_STORE=none``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import (
    CRAWL_LOOPBACK,
    Stack,
    bench_stack,
    count_activities,
    header,
    html_page,
    is_reference,
    kib,
    page_index,
    run_main,
    serve_pages,
    timed_run,
    verdict,
)
from temporalio.client import WorkflowHistory

from offline.search_index import SearchIndex
from runtime.blob_gc import payloads_in
from storage.subtrees import references_in
from tests.support.runs import QUESTION
from workflows.contracts.research import ResearchRequest

PAGES = 20
PAGE_BYTES = 1024 * 1024
DEFAULT_TARGET = 256 * 1024
CRAWL_TARGET = 1024 * 1024
INLINE_LIMIT = 256 * 1024
PLAN_SIZES = (3, 6, 12)
PER_CALL_TARGET = 4096  # history bytes per model call at 12 steps
LINEAR_SLACK = 1.25  # bytes per call at 12 steps over those at 3: linear growth keeps it near 1
COMPLETED = "workflow_execution_completed_event_attributes"


@dataclass(frozen=True)
class Size:
    label: str
    event_bytes: int
    json_bytes: int
    events: int
    largest_inline: int
    references: int
    subtree_references: int
    crawls: tuple[int, int]  # crawl_tool activities (scheduled, completed)

    def line(self, target: int) -> str:
        ok = self.event_bytes <= target and self.largest_inline <= INLINE_LIMIT
        return (f"{self.label}: {kib(self.event_bytes)} in {self.events} events (JSON {kib(self.json_bytes)}), "
                f"largest inline payload {kib(self.largest_inline)}, {self.references} claim-check reference(s) "
                f"and {self.subtree_references} subtree reference(s), "
                f"{self.crawls[1]}/{self.crawls[0]} crawls completed; target <= {kib(target)} "
                f"and no inline payload over {kib(INLINE_LIMIT)}: {verdict(ok)}")


@dataclass(frozen=True)
class PlanRow:
    subtrees: bool
    steps: int
    history_bytes: int
    result_bytes: int  # the run's result (the report), inline below the whole-payload threshold
    model_calls: int
    blob_bytes: int

    @property
    def per_call(self) -> float:
        return self.history_bytes / self.model_calls

    @property
    def per_call_without_result(self) -> float:
        return (self.history_bytes - self.result_bytes) / self.model_calls

    def line(self) -> str:
        switch = "on " if self.subtrees else "off"
        return (f"subtrees={switch} {self.steps:>2} steps: history {kib(self.history_bytes)}, "
                f"{self.model_calls} model calls, {self.per_call:,.0f} B per model call "
                f"({self.per_call_without_result:,.0f} B without the result event, {kib(self.result_bytes)}), "
                f"blob store +{kib(self.blob_bytes)}")


def measure(label: str, history: WorkflowHistory) -> Size:
    payloads = [payload for event in history.events for payload in payloads_in(event)]
    inline = [payload.ByteSize() for payload in payloads if not is_reference(payload)]
    return Size(label, sum(event.ByteSize() for event in history.events), len(history.to_json()),
                len(history.events), max(inline, default=0), sum(1 for p in payloads if is_reference(p)),
                sum(len(references_in(p)) for p in payloads), count_activities(history, "crawl_tool"))


def store_bytes(stack: Stack) -> int:
    blobs = stack.workdir / "home" / "blobs"
    return sum(path.stat().st_size for path in Path(blobs).rglob("*") if path.is_file())


async def two_runs(stack: Stack, store: str, crawl_index: SearchIndex) -> tuple[Size, Size]:
    default = ResearchRequest(question=QUESTION, auto_accept_plan=True)
    handle, _, _ = await timed_run(stack, default, f"size-default-{store}")
    plain = measure(f"default run, store={store}", await handle.fetch_history())
    default_index, stack.search.index = stack.search.index, crawl_index
    try:
        crawl = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=2, max_search_results=PAGES)
        handle, _, _ = await timed_run(stack, crawl, f"size-crawl-{store}")
        heavy = measure(f"crawl run ({PAGES} x 1 MB pages), store={store}", await handle.fetch_history())
    finally:
        stack.search.index = default_index
    return plain, heavy


async def plan_series(stack: Stack, subtrees: bool) -> list[PlanRow]:
    rows = []
    for steps in PLAN_SIZES:
        before = store_bytes(stack)
        request = ResearchRequest(question=QUESTION, auto_accept_plan=True, max_step_num=steps)
        handle, result, _ = await timed_run(stack, request, f"size-plan-{steps}")
        assert result.plan is not None and len(result.plan.steps) == steps, f"the planner wrote {result.plan}"
        history = await handle.fetch_history()
        [completed] = [event for event in history.events if event.HasField(COMPLETED)]
        rows.append(PlanRow(subtrees, steps, sum(event.ByteSize() for event in history.events),
                            completed.ByteSize(), count_activities(history, "chat")[1], store_bytes(stack) - before))
    return rows


def series_verdict(rows: list[PlanRow]) -> str:
    first, last = rows[0], rows[-1]
    growth = last.per_call_without_result / first.per_call_without_result
    met = last.per_call <= PER_CALL_TARGET and growth <= LINEAR_SLACK
    return (f"subtrees={'on' if last.subtrees else 'off'}: {last.per_call:,.0f} B per model call at {last.steps} steps "
            f"(target <= {PER_CALL_TARGET}); without the result event {growth:.2f}x the {first.steps}-step figure "
            f"(linear: <= {LINEAR_SLACK}): "
            f"{verdict(met)}")


async def main() -> None:
    header("History size")
    for subtrees in (True, False):
        async with bench_stack(worker_env={"DEERFLOW_SUBTREES": str(subtrees).lower()}) as stack:
            rows = await plan_series(stack, subtrees)
        for row in rows:
            print(row.line())
        print(series_verdict(rows), flush=True)
    paths = [f"/page-{number}.html" for number in range(1, PAGES + 1)]
    pages = {path: html_page(f"Solid-state battery report {path}", PAGE_BYTES) for path in paths}
    results: list[tuple[Size, Size]] = []
    with serve_pages(pages) as base_url:
        for store in ("filesystem", "none"):
            async with bench_stack(worker_env={"DEERFLOW_PAYLOAD_STORE": store, **CRAWL_LOOPBACK}) as stack:
                results.append(await two_runs(stack, store, page_index(base_url, paths)))
    for plain, heavy in results:
        print(plain.line(DEFAULT_TARGET))
        print(heavy.line(CRAWL_TARGET))


if __name__ == "__main__":
    run_main(main())
