"""Subtree codec cost: what content-addressed subtrees (storage/subtrees.py) add to each activity.

Run from the repository root: ``.venv/bin/python bench/subtree_cost.py`` (about 30 seconds).

Why in process: the codec runs inside the data converter, so its cost is the converter's time with
it on, minus the time with it off, for the payloads a run really moves. One worker process encodes
and decodes both sides of each activity (the workflow encodes the input and decodes the result,
the activity decodes the input and encodes the result), so the same converter does all four here,
on the filesystem store in a fresh directory, with each new blob fsynced (the default) and not.
The trace is an agent loop of 12 turns: each ``chat`` input re-sends the conversation and the
tool specs with one new tool result (3 KB, new text every turn), and each result is a new 2 KB
message; each ``web_search`` takes a short query and returns the 3 KB result. Every turn thus
writes new blobs, as a real run does. The configurations alternate within one invocation (this
machine is shared and noisy); medians of 15 loops, wall time and the process's CPU time.
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
from workflows.contracts.chat import ChatMessage, ChatRequest, ChatResponse, ToolSpec

TURNS = 12
LOOPS = 15
TARGET_MS = 1.0
CONFIGS: dict[str, dict[str, bool]] = {
    "subtrees off": {"DEERFLOW_SUBTREES": False},
    "subtrees on": {"DEERFLOW_SUBTREES": True},
    "subtrees on, DEERFLOW_BLOB_FSYNC=false": {"DEERFLOW_SUBTREES": True, "DEERFLOW_BLOB_FSYNC": False},
}
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
    wall: dict[str, list[float]] = {name: [] for name in CONFIGS}
    cpu: dict[str, list[float]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="deerflow-subtree-cost-") as tmp:
        converters = {name: data_converter(Settings(DEERFLOW_HOME=Path(tmp) / name, **values))  # type: ignore[arg-type]
                      for name, values in CONFIGS.items()}
        for loop in range(LOOPS):
            for name, converter in converters.items():
                spent, used, activities = await agent_loop(converter, loop)
                wall[name].append(spent / activities * 1000)
                cpu[name].append(used / activities * 1000)
    for kind, samples in (("wall", wall), ("CPU (all threads)", cpu)):
        off = statistics.median(samples["subtrees off"])
        for name in ("subtrees on", "subtrees on, DEERFLOW_BLOB_FSYNC=false"):
            on = statistics.median(samples[name])
            print(f"converter {kind} time per activity, {name}: {on:.3f} ms against {off:.3f} ms off; "
                  f"added {on - off:.3f} ms (target < {TARGET_MS} ms): {verdict(on - off < TARGET_MS)}")


if __name__ == "__main__":
    run_main(main())
