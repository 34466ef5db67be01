"""What a worker's start costs: CPU seconds until it polls, and until its start-up work is done.

Run from the repository root (about 5 minutes; twice that with ``--baseline``)::

    .venv/bin/python bench/worker_start.py [--rounds 3] [--baseline /tmp/worker-base] [--queues all,model,tools,sandbox]

One dev server. Each round starts ``worker.py --queues Q`` of each tree in turn (this one and, with
``--baseline``, a ``git archive`` of another commit; the order alternating) with the offline
providers and a home of its own, and samples its CPU time (user + system, from /proc) every 10 ms:
when its log says it polls, and once it has settled (it and its children used less than 20 ms of CPU
over 2 s: its warm-up, the preload of its queues' libraries and the fork server's start, is over).
Its children (the extraction fork server, the sandbox's probe) are counted apart. Then it is
stopped. CPU time, unlike wall time, moves little with the machine's load, which is why this bench
reads it. Target (issue #45): a worker's start costs at most 1.5 s of CPU (3.4 s at the start of
the issue).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from checkouts import PYTHON, Tree, ab_parser, begin, load_note, timed, trees
from harness import children_cpu, median, run_main

from tests.support.processes import DevServer

POLLING = b"Worker polling"
SETTLED_CPU, SETTLED_SECONDS = 0.02, 2.0
TARGET_CPU = 1.5
Readings = dict[tuple[str, str], dict[str, list[float]]]  # (tree, queues) -> figure -> one value a start


def own_cpu(pid: int) -> float:
    """The process's own user + system time (its children's not included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_once(tree: Tree, queues: str, address: str, home: Path) -> dict[str, float]:
    """Start the tree's worker, follow it to settled, stop it; its figures."""
    home.mkdir(parents=True)
    log_path = home / "worker.log"
    env = tree.environment({"DEERFLOW_HOME": str(home), "TEMPORAL_ADDRESS": address})
    began = time.perf_counter()
    with log_path.open("ab") as log:
        process = subprocess.Popen([PYTHON, str(tree.root / "worker.py"), "--queues", queues], cwd=tree.root, env=env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        figures = _follow(process, log_path, began)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            if process.poll() is None:
                os.killpg(process.pid, signum)
        process.wait(timeout=60)
    return figures


def _follow(process: subprocess.Popen[bytes], log_path: Path, began: float) -> dict[str, float]:
    """Sample until the worker and its children have settled (their CPU together, so that a fork server
    still starting counts); the worker's own CPU then, and its children's."""
    figures: dict[str, float] = {}
    last_total, last_change, last_own, last_children = 0.0, time.perf_counter(), 0.0, 0.0
    deadline = began + 180
    while time.perf_counter() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the worker exited ({process.returncode}): {log_path.read_text()[-800:]}")
        own, children = own_cpu(process.pid), children_cpu(process.pid)
        now = time.perf_counter()
        if "CPU to poll" not in figures and POLLING in log_path.read_bytes():
            figures.update({"CPU to poll": own, "seconds to poll": now - began})
        if own + children - last_total > SETTLED_CPU:
            last_total, last_change, last_own, last_children = own + children, now, own, children
        elif "CPU to poll" in figures and now - last_change >= SETTLED_SECONDS:
            figures.update({"CPU settled": last_own, "children CPU": last_children,
                            "seconds to settle": last_change - began})
            return figures
        time.sleep(0.01)
    raise RuntimeError(f"the worker did not settle within 180 s: {figures}")


def report(readings: Readings, labels: list[str], queue_sets: list[str]) -> None:
    print("\nmedian; " + " / ".join(labels))
    for queues in queue_sets:
        print(f"  --queues {queues}")
        for figure in ("CPU to poll", "CPU settled", "children CPU", "seconds to poll", "seconds to settle"):
            cells = [f"{median(readings[(label, queues)][figure]):.2f}" for label in labels]
            print(f"    {figure:<18} " + " / ".join(cells))
    settled = median(readings[(labels[0], queue_sets[0])]["CPU settled"])
    print(f"  start target <= {TARGET_CPU} s of CPU (--queues {queue_sets[0]}, settled): "
          f"{'met' if settled <= TARGET_CPU else 'missed'} ({settled:.2f} s)")


async def main() -> None:
    parser = ab_parser(__doc__, rounds=3)
    parser.add_argument("--queues", default="all,model,tools,sandbox", help="comma-separated --queues values")
    args = parser.parse_args()
    queue_sets = args.queues.split(",")
    begin("Worker start: CPU to poll and to settle")
    with tempfile.TemporaryDirectory(prefix="worker-start-") as scratch:
        workdir = Path(scratch)
        chosen = trees(args.baseline, workdir)
        readings: Readings = {(tree.label, queues): defaultdict(list) for tree in chosen for queues in queue_sets}
        server = DevServer(workdir / "temporal.db").start()
        try:
            for tree in chosen:  # bytecode compiled before anything is timed, as after any first start
                timed([PYTHON, "-c", "import worker, activities.model.llm"], tree.root, tree.environment())
            for round_number in range(args.rounds):
                for queues in queue_sets:
                    for tree in chosen if round_number % 2 == 0 else list(reversed(chosen)):
                        home = tree.home / f"{queues}-{round_number}"
                        for figure, value in start_once(tree, queues, server.address, home).items():
                            readings[(tree.label, queues)][figure].append(value)
                print(f"round {round_number + 1}/{args.rounds} done ({load_note()})", flush=True)
        finally:
            server.stop()
        report(readings, [tree.label for tree in chosen], queue_sets)
    print(f"end: {load_note()}")


if __name__ == "__main__":
    run_main(main())
