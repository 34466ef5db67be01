"""Subtree codec cost: what content-addressed subtrees (storage/subtrees.py) add to each activity.

Run from the repository root: ``.venv/bin/python bench/subtree_cost.py`` (about 30 seconds).

Why in process: the codec runs inside the data converter, so its cost is the converter's time with
it on, minus the time with it off, for the payloads a run really moves. One worker process encodes
and decodes both sides of each activity (the workflow encodes the input and decodes the result,
the activity decodes the input and encodes the result), so the same converter does all four here,
on the filesystem store (fsync included) in a fresh directory. The trace is an agent loop of 12
turns: each ``chat`` input re-sends the conversation and the tool specs with one new tool result
(3 KB, new text every turn) and each result is a new 2 KB message; each ``web_search`` takes a
short query and returns the 3 KB result. Every turn thus writes new blobs, as a real run does.
A and B alternate within one invocation (this machine is shared and noisy); medians of 15 loops.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from harness import header, run_main, verdict
from temporalio.converter import DataConverter

from config.settings import Settings
from runtime.converter import data_converter
from workflows.models import ChatMessage, ChatRequest, ChatResponse, ToolSpec

TURNS = 12
LOOPS = 15
TARGET_MS = 1.0
TOOLS = [ToolSpec(name=name, description=f"{name}: " + "Look things up on the web. " * 6,
                  parameters={"type": "object", "properties": {"query": {"type": "string"}}})
         for name in ("web_search", "crawl_tool", "local_search_tool")]


def text(seed: str, size: int) -> str:
    words = [f"{seed}-{n}" for n in range(size // 8)]
    return " ".join(words)[:size]


async def round_trip(converter: DataConverter, value: object, kind: type) -> None:
    payloads = await converter.encode([value])
    await converter.decode(payloads, [kind])


async def agent_loop(converter: DataConverter, loop: int) -> tuple[float, float, int]:
    """Wall and CPU seconds spent in the converter for one agent loop, and the number of activities."""
    messages = [ChatMessage(role="user", content=text(f"task{loop}", 1500))]
    spent, cpu, activities = 0.0, 0.0, 0
    for turn in range(TURNS):
        seed = f"{loop}.{turn}"
        request = ChatRequest(prompt="researcher", messages=messages, tools=TOOLS)
        reply = ChatResponse(message=ChatMessage(role="assistant", content=text(f"reply{seed}", 2000)))
        began, began_cpu = time.perf_counter(), time.process_time()
        await round_trip(converter, request, ChatRequest)
        await round_trip(converter, reply, ChatResponse)
        await round_trip(converter, f"query {seed}", str)
        result = text(f"search{seed}", 3000)
        await round_trip(converter, result, str)
        spent += time.perf_counter() - began
        cpu += time.process_time() - began_cpu
        activities += 2
        messages = [*messages, ChatMessage(role="tool", tool_call_id=seed, content=result)]
    return spent, cpu, activities


async def main() -> None:
    header("Subtree codec cost per activity (filesystem store, in process)")
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="deerflow-subtree-cost-") as tmp:
        converters = {on: data_converter(Settings(DEERFLOW_HOME=Path(tmp) / str(on), DEERFLOW_SUBTREES=on))
                      for on in (True, False)}
        for loop in range(LOOPS):
            for on in (True, False):
                spent, used, activities = await agent_loop(converters[on], loop)
                wall[on].append(spent / activities * 1000)
                cpu[on].append(used / activities * 1000)
    for name, samples in (("wall", wall), ("CPU (all threads)", cpu)):
        on, off = (statistics.median(samples[flag]) for flag in (True, False))
        print(f"converter {name} time per activity: subtrees on {on:.3f} ms, off {off:.3f} ms; "
              f"added {on - off:.3f} ms (target < {TARGET_MS} ms): {verdict(on - off < TARGET_MS)}")


if __name__ == "__main__":
    run_main(main())
