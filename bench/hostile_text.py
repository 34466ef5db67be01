"""Hostile text: every handler of untrusted text fed a megabyte of the worst inputs found (issue #42 §1).

Run from the repository root: ``.venv/bin/python bench/hostile_text.py`` (a few minutes);
``--handlers plan,terminal`` for some of them, ``--mb 2`` for a larger top size.

Why it is measured this way: a handler that is super-linear shows it only on large inputs, so each
is fed every shape of tests/support/hostile_text.py (a run of each unit that once made a pattern
quadratic, bare and framed by other text, brackets nested half the text deep, lone surrogates,
mixed line ends) at a quarter of the top size; its three slowest shapes are then timed at half and
at the top size. Time is the process's CPU time (``time.process_time``), so other jobs on a shared
machine do not count, and the best of ``ROUNDS``. The target: at most 1 s per MB at the top size,
and growth from a quarter to the whole near 4 (linear); a quadratic handler shows 16. A handler
that refuses text over a cap first (a plan over 200,000 characters) shows only the refusal.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benches run as plain scripts

from tests.support.hostile_text import HANDLERS, shapes

ROUNDS = 2
SLOWEST = 3  # shapes per handler timed at every size
MB = 1_000_000


def cpu_seconds(handler: Callable[[str], None], text: str) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.process_time()
        handler(text)
        best = min(best, time.process_time() - start)
    return best


def measure(name: str, top: int) -> tuple[str, float, float, float]:
    """The handler's worst shape at ``top`` characters: (shape, seconds at a quarter, half, top)."""
    handler = HANDLERS[name]
    quarter = {shape: cpu_seconds(handler, text) for shape, text in shapes(top // 4).items()}
    half, whole = shapes(top // 2), shapes(top)
    rows = [(shape, quarter[shape], cpu_seconds(handler, half[shape]), cpu_seconds(handler, whole[shape]))
            for shape in sorted(quarter, key=quarter.__getitem__, reverse=True)[:SLOWEST]]
    return max(rows, key=lambda row: row[3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=1.0, help="the top size, in millions of characters")
    parser.add_argument("--handlers", default="", help="comma-separated names (default: all)")
    args = parser.parse_args()
    names = [name for name in args.handlers.split(",") if name] or list(HANDLERS)
    top = int(args.mb * MB)
    print(f"{'handler':<18} {'worst shape':<24} {'1/4':>8} {'1/2':>8} {'top':>8} {'s/MB':>6} {'growth':>6}")
    over = []
    for name in names:
        shape, quarter, half, whole = measure(name, top)
        per_mb, growth = whole / args.mb, whole / max(quarter, 1e-4)
        if per_mb > 1.0:
            over.append(name)
        print(f"{name:<18} {shape:<24} {quarter:>8.3f} {half:>8.3f} {whole:>8.3f} {per_mb:>6.2f} {growth:>6.1f}",
              flush=True)
    print(f"over 1 s per MB: {', '.join(over) or 'none'}")


if __name__ == "__main__":
    main()
