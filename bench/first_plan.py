"""How long a new user waits for the first plan: ``starter.py run`` with nothing running.

Run from the repository root (about 2 minutes; twice that with ``--baseline``)::

    .venv/bin/python bench/first_plan.py [--rounds 3] [--baseline /tmp/first-plan-base]

Each round, for each tree in turn (this one and, with ``--baseline``, a ``git archive`` of another
commit; the order alternating), a fresh ``DEERFLOW_HOME`` and free ports: nothing runs and no
database exists, as on a new machine (bytecode is compiled once beforehand, as after any first
command). ``starter.py run QUESTION`` starts the embedded dev server, its background worker and the
run on the offline demonstration model; the round ends when the plan is printed, then
``starter.py down`` stops everything.

The phases, from the command's start, read from the lines it prints (each stamped as it arrives)
and the worker's log: ``cli`` (it says no server answers: its own start-up and settings), ``server``
(the dev server answers: its Web UI line), ``worker polls`` (the worker's "Worker polling" line),
``run started`` ("Started research run"), ``plan`` (the plan's first line on standard output).
Beside them, the CPU seconds the worker process had used when the plan showed (its children, the
extraction fork server among them, counted apart). Target (issue #45): the plan within 8 s of the
command on a quiet machine.
"""

from __future__ import annotations

import json
import selectors
import subprocess
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from checkouts import PYTHON, Tree, ab_parser, begin, load_note, timed, trees
from harness import children_cpu, cpu_seconds, median, run_main

from runtime.embedded import free_port

QUESTION = "Is nuclear power safe?"
TARGET_SECONDS = 8.0
# The phase each line of the command's standard error ends (the first line to start with it).
MARKS = {"No Temporal server": "cli", "Temporal Web UI": "server", "Started research run": "run started"}
POLLING = "Worker polling"  # the worker's log line once its queues are polled
PHASES = ("cli", "server", "worker polls", "run started", "plan")


def fresh(tree: Tree, round_number: int) -> dict[str, str]:
    """The environment of a first run: a home of its own, nothing listening at its ports."""
    home = tree.home / f"round-{round_number}"
    home.mkdir(parents=True)
    return tree.environment({"DEERFLOW_HOME": str(home), "DEERFLOW_EMBEDDED_ADDRESS": f"127.0.0.1:{free_port()}",
                             "DEERFLOW_UI_PORT": str(free_port()), "DEERFLOW_CODEC_PORT": str(free_port())})


def first_plan(tree: Tree, env: dict[str, str]) -> dict[str, float]:
    """Run ``starter.py run`` until its plan shows; each phase's seconds from the command's start."""
    began, began_epoch = time.perf_counter(), time.time()
    process = subprocess.Popen(tree.starter("run", QUESTION), cwd=tree.root, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    seen: dict[str, float] = {}
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "out")
        selector.register(process.stderr, selectors.EVENT_READ, "err")
        deadline = began + 300
        while "plan" not in seen:
            if time.perf_counter() > deadline or not selector.get_map():
                process.kill()
                raise RuntimeError(f"{tree.label}: no plan within 300 s; seen {seen}")
            for key, _ in selector.select(timeout=1):
                line = key.fileobj.readline()  # type: ignore[union-attr]
                if not line:
                    selector.unregister(key.fileobj)
                    continue
                at = time.perf_counter() - began
                if key.data == "out":
                    seen["plan"] = at
                for start, phase in MARKS.items():
                    if line.startswith(start):
                        seen.setdefault(phase, at)
    home = Path(env["DEERFLOW_HOME"])
    seen.update(_worker_figures(home, began_epoch))
    process.kill()
    process.wait()
    return seen


def _worker_figures(home: Path, began_epoch: float) -> dict[str, float]:
    """When the worker logged that it polls (from the command's start), and its CPU so far."""
    figures: dict[str, float] = {}
    pid = int(_record(home, "worker")["pid"])
    figures["worker CPU"] = cpu_seconds(pid)
    figures["its children's CPU"] = children_cpu(pid)
    for line in (home / "worker.log").read_text(errors="replace").splitlines():
        if POLLING in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            figures["worker polls"] = stamp - began_epoch
            break
    return figures


def _record(home: Path, name: str) -> dict[str, object]:
    return dict(json.loads((home / f"{name}.pid").read_text()))


def report(readings: dict[str, dict[str, list[float]]]) -> None:
    labels = list(readings)
    print("\nmedian seconds from the command's start; " + " / ".join(labels))
    for phase in (*PHASES, "worker CPU", "its children's CPU"):
        cells = [f"{median(readings[label][phase]):.2f}" if readings[label][phase] else "-" for label in labels]
        print(f"  {phase:<20} " + " / ".join(cells))
    plan = median(readings[labels[0]]["plan"])
    met = "met" if plan <= TARGET_SECONDS else "missed"
    print(f"  first plan target <= {TARGET_SECONDS:.0f} s (quiet machine): {met} here ({plan:.2f} s)")


async def main() -> None:
    parser = ab_parser(__doc__, rounds=3)
    args = parser.parse_args()
    begin("First plan from `starter.py run` with nothing running")
    with tempfile.TemporaryDirectory(prefix="first-plan-") as scratch:
        chosen = trees(args.baseline, Path(scratch))
        readings: dict[str, dict[str, list[float]]] = {tree.label: defaultdict(list) for tree in chosen}
        for tree in chosen:  # bytecode compiled before anything is timed, as after any first command
            timed(tree.starter("--help"), tree.root, tree.environment())
            timed([PYTHON, "-c", "import starter, worker, activities.model.llm, cli.research"], tree.root,
                  tree.environment())
        for round_number in range(args.rounds):
            for tree in chosen if round_number % 2 == 0 else list(reversed(chosen)):
                env = fresh(tree, round_number)
                try:
                    for phase, seconds in first_plan(tree, env).items():
                        readings[tree.label][phase].append(seconds)
                finally:
                    timed(tree.starter("down"), tree.root, env)
            print(f"round {round_number + 1}/{args.rounds} done ({load_note()})", flush=True)
        report(readings)
    print(f"end: {load_note()}")


if __name__ == "__main__":
    run_main(main())
