"""Token previews and the event feed, seen from a page: first token vs whole message, feed delay,
and the history bytes the feed adds.

Run from the repository root: ``.venv/bin/python bench/token_stream.py`` (about 1-2 minutes).

How: the fake model answers after ``LATENCY`` seconds and then streams its reply in 64-character
deltas ``PIECE`` seconds apart (about 100 tokens/s, a hosted model's pace). A real ``worker.py``
on a dev server sends its previews to the API server (in this process, on a free loopback port),
and this script follows one run (auto-accepted plan, one step) through ``/api/runs/ID/events``
exactly as our page does, stamping each SSE event as it arrives.

* **First token vs whole message**, per model turn: from the turn's ``ActivityTaskScheduled`` in
  history to the first preview on the stream, and to the feed's final message. Without previews
  a reader sees nothing before the whole message.
* **Event-feed delay**: for every feed item, from its history event's time to its arrival.
* **History bytes the feed adds**: the same deterministic run again, started the same way, with
  nobody following, compared with the followed run (event count, types, and bytes).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from harness import SCHEDULED, Stack, bench_stack, header, run_main
from temporalio.api.enums.v1 import EventType

from config.settings import load_settings
from runtime.blob_gc import payloads_in
from tests.support.processes import free_port
from tests.support.web_server import api_server

LATENCY = 0.5
PIECE = 0.15
TOKEN = "bench-stream-token-0123456789abcdef"
REQUEST = {"question": "How do heat pumps compare with gas boilers?", "auto_accept_plan": True,
           "max_step_num": 1, "enable_background_investigation": False}


@asynccontextmanager
async def api(stack: Stack, port: int) -> AsyncIterator[str]:
    settings = load_settings().model_copy(update={"web_token": None, "token_stream_token": TOKEN})
    async with api_server(stack.client, settings, port=port) as url:
        yield url


async def follow(base: str) -> tuple[str, list[tuple[float, str, dict, str | None]]]:
    """Start a run through the page's API and read its feed; each event with its arrival time."""
    events: list[tuple[float, str, dict, str | None]] = []
    async with httpx.AsyncClient(timeout=300) as http:
        run = (await http.post(f"{base}/api/runs", json=REQUEST)).json()["id"]
        async with http.stream("GET", f"{base}/api/runs/{run}/events") as response:
            fields: dict[str, str] = {}
            async for line in response.aiter_lines():
                if line:
                    if not line.startswith(":"):
                        key, _, value = line.partition(": ")
                        fields[key] = value
                    continue
                if "event" in fields:
                    events.append((time.time(), fields["event"], json.loads(fields["data"]), fields.get("id")))
                fields = {}
    return run, events


async def history_events(stack: Stack, run: str) -> list:
    return [event async for event in stack.client.get_workflow_handle(run).fetch_history_events()]


async def main() -> None:
    header("Token previews and the event feed")
    port = free_port()
    sink = f"http://127.0.0.1:{port}/internal/token-stream"
    async with bench_stack(model_latency=LATENCY, worker_env={"DEERFLOW_TOKEN_STREAM_URL": sink,
                                                              "DEERFLOW_TOKEN_STREAM_TOKEN": TOKEN}) as stack:
        stack.model.piece_seconds = PIECE
        async with api(stack, port) as base:
            run, events = await follow(base)
            # The same run again, started the same way (same id shape and summary), nobody following.
            async with httpx.AsyncClient(timeout=30) as http:
                alone = (await http.post(f"{base}/api/runs", json=REQUEST)).json()["id"]
            await stack.client.get_workflow_handle(alone).result()
        history = await history_events(stack, run)

        # First token and whole message, per model turn.
        scheduled = {e.activity_task_scheduled_event_attributes.activity_id: e.event_time.ToDatetime().timestamp()
                     for e in history if e.event_type == SCHEDULED
                     and e.activity_task_scheduled_event_attributes.activity_type.name == "chat"}
        first: dict[str, float] = {}
        for at, _, data, _ in events:
            if data.get("preview"):
                first.setdefault(data["id"].rsplit(".", 1)[0], at)
        print(f"model: {LATENCY} s to the first byte, then 64 characters every {PIECE} s")
        print("| turn | agent | first token on the page | whole message on the page | ratio |")
        print("|---|---|---:|---:|---:|")
        ratios = []
        for at, kind, data, _ in events:
            if kind != "message_chunk" or "stream_id" not in data:
                continue
            turn = data["stream_id"].rsplit(".", 1)[0]
            activity_id = turn.rsplit(".", 1)[1]
            start = scheduled[activity_id]
            whole = at - start
            if turn in first:
                ttft = first[turn] - start
                ratios.append(ttft / whole)
                print(f"| {activity_id} | {data['agent']} | {ttft:.2f} s | {whole:.2f} s | {ttft / whole:.2f} |")
            else:
                print(f"| {activity_id} | {data['agent']} | (no text to preview) | {whole:.2f} s | - |")
        if ratios:
            print(f"first token / whole message: median {statistics.median(ratios):.2f}, max {max(ratios):.2f}")

        # Event-feed delay: history event time -> arrival on the stream.
        times = {e.event_id: e.event_time.ToDatetime().timestamp() for e in history}
        delays = [at - times[int(item_id.split(".")[1])] for at, _, _, item_id in events if item_id]
        print(f"event-feed delay over {len(delays)} items: median {statistics.median(delays):.3f} s, "
              f"p90 {statistics.quantiles(delays, n=10)[-1]:.3f} s, max {max(delays):.3f} s")

        # History bytes the feed adds: the same run, unfollowed.
        quiet = await history_events(stack, alone)
        followed_bytes, quiet_bytes = sum(e.ByteSize() for e in history), sum(e.ByteSize() for e in quiet)
        same_types = [EventType.Name(e.event_type) for e in history] == [EventType.Name(e.event_type) for e in quiet]
        payload_bytes = [sum(p.ByteSize() for e in h for p in payloads_in(e)) for h in (history, quiet)]
        print(f"history: followed run {len(history)} events, {followed_bytes} bytes; unfollowed run "
              f"{len(quiet)} events, {quiet_bytes} bytes; same event types in the same order: {same_types}; "
              f"difference {followed_bytes - quiet_bytes:+d} bytes (payloads: {payload_bytes[0]} vs "
              f"{payload_bytes[1]} bytes, difference {payload_bytes[0] - payload_bytes[1]:+d})")


if __name__ == "__main__":
    run_main(main())
