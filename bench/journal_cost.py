"""In-flight journal cost: what journalling each attempt's task token (hosting/inflight_journal.py) adds.

Run from the repository root: ``.venv/bin/python bench/journal_cost.py`` (a few seconds).

Why in process: the journal is two unbuffered appends per attempt (its start and its end) in the
worker's interceptor, plus a rewrite of the open attempts every few thousand lines, so its cost is
that code's own time, far below what an end-to-end run could resolve (activities are 20 ms apart).
Each loop journals ``ATTEMPTS`` attempts with a 200-byte token (a task token is a small protobuf),
with ``OPEN`` other attempts held open throughout (a busy worker's model queue), so compactions
rewrite that many lines. Medians of ``LOOPS`` loops, wall time and the process's CPU time.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from harness import header, run_main, verdict

from hosting.inflight_journal import InflightJournal, ProcessStamp

ATTEMPTS = 20_000
OPEN = 64
LOOPS = 7
TOKEN = os.urandom(200)
TARGET_US = 100.0  # 0.5% of the 20 ms between two activities of a run


def loop(directory: Path) -> tuple[float, float]:
    """Seconds of wall and CPU time per attempt journalled (its start and its end)."""
    journal = InflightJournal(directory, ProcessStamp.here("bench@host", "127.0.0.1:7233", "default")).start()
    for _ in range(OPEN):
        journal.opened(TOKEN)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(ATTEMPTS):
        journal.closed(journal.opened(TOKEN))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    journal.close()
    journal.path.unlink(missing_ok=True)
    return wall / ATTEMPTS, cpu / ATTEMPTS


async def main() -> None:
    header("In-flight journal cost per activity attempt (in process)")
    with tempfile.TemporaryDirectory(prefix="journal-cost-") as tmp:
        samples = [loop(Path(tmp)) for _ in range(LOOPS)]
    wall = statistics.median(sample[0] for sample in samples) * 1e6
    cpu = statistics.median(sample[1] for sample in samples) * 1e6
    print(f"{ATTEMPTS} attempts x {LOOPS} loops, {OPEN} held open, {len(TOKEN)}-byte tokens: "
          f"{wall:.1f} us wall, {cpu:.1f} us CPU per attempt (target < {TARGET_US:.0f} us): "
          f"{verdict(wall < TARGET_US)}")


if __name__ == "__main__":
    run_main(main())
