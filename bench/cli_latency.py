"""How long a person waits for each CLI command and for the page's API, against Temporal's own CLI.

Run from the repository root (about 3 minutes; twice that with ``--baseline``)::

    .venv/bin/python bench/cli_latency.py [--rounds 5] [--baseline /tmp/cli-base]

One dev server; each tree (this one and, with ``--baseline``, a ``git archive`` of another commit)
gets a namespace and a ``DEERFLOW_HOME`` of its own, so its commands go through the embedded default
as a user's do: the server answers at the embedded address, and the first command starts the
tree's own background worker (the record every later command checks). Each tree then has one
finished run (for ``status``, ``report``, ``costs`` and ``list``) and runs paused at their plan
review (one per round for ``review --accept``, one for the page's review).

Each round runs, for each tree in turn (the order alternating), ``--version``, ``--help``,
``status``, ``list``, ``review --accept``, ``costs`` and ``report`` as separate processes, the page's
API (``starter.py serve``: the run list, a run, a review) over HTTP, and ``temporal workflow
describe`` and ``temporal workflow list`` on the same server and namespace. Reported: the median
wall time of each (and its CPU time, which the machine's load moves much less), and its ratio to
``temporal``'s (``describe`` for one run, ``list`` for listings). The short commands go to the
tree's command server (cli/command_client.py), as a user's do once one runs, and again with it off
(" (cold)": a new interpreter's imports, what the first command after a while pays); their CPU is the
client's and the serving child's (from the server's log). Targets (issue #45), on a quiet
machine: ``--version`` and ``--help`` at most 0.2 s; ``status``, ``list`` and ``review`` at most
0.5 s or 5 times ``temporal``'s; the page's API the same.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from checkouts import PYTHON, Sample, Tree, ab_parser, begin, load_note, timed, trees
from harness import command_server_up, median, run_main
from temporalio.client import Client, WorkflowExecutionStatus

from cli.command_client import SWITCH
from runtime.embedded import free_port
from tests.support.processes import TEMPORAL_CLI, DevServer, wait_for_port
from workflows.research.visibility import indexed_place

QUESTION = "Is nuclear power safe?"
SERVED_CLIENT_CPU = 0.2  # seconds: more, and the command ran in its own process (imports alone are 0.5)
DONE = "cli-bench-done"  # a finished run: status, report, costs
FAST_TARGET = 0.2  # --version and --help, seconds
TARGET, TEMPORAL_TIMES = 0.5, 5.0  # status, list, review and the page's API: seconds, or times temporal's
TARGETED = {"--version": FAST_TARGET, "--help": FAST_TARGET, "status": TARGET, "list": TARGET,
            "review --accept": TARGET, "GET /api/runs": TARGET, "GET /api/runs/ID": TARGET,
            "POST /api/runs/ID/review": TARGET}
# Which temporal command each is held against: one run's description, or a listing.
AGAINST = {"status": "describe", "review --accept": "describe", "report": "describe", "list": "list",
           "costs": "list", "GET /api/runs": "list", "GET /api/runs/ID": "describe",
           "POST /api/runs/ID/review": "describe"}


Readings = dict[str, dict[str, list[float]]]  # tree label -> what was timed -> seconds, one a round


def review_id(kind: str, round_number: int) -> str:
    return f"cli-bench-{kind}-{round_number}"


def cli_commands(tree: Tree, round_number: int, cold: bool = False) -> dict[str, list[str]]:
    """Each command as a user types it; ``cold``: the served ones again, with the server off (their
    names end in " (cold)"; a review of a run of their own)."""
    served = {
        "status": tree.starter("status", DONE),
        "list": tree.starter("list"),
        "review --accept": tree.starter("review", review_id("cold" if cold else "cli", round_number), "--accept"),
        "costs": tree.starter("costs"),
        "report": tree.starter("report", DONE),
    }
    if cold:
        return {f"{name} (cold)": argv for name, argv in served.items()}
    return {"--version": tree.starter("--version"), "--help": tree.starter("--help"), **served}


def temporal_commands(tree: Tree, address: str) -> dict[str, list[str]]:
    where = ["--address", address, "--namespace", tree.env["TEMPORAL_NAMESPACE"]]
    return {"temporal describe": [TEMPORAL_CLI, "workflow", "describe", "-w", DONE, *where],
            "temporal list": [TEMPORAL_CLI, "workflow", "list", *where]}


def checked(sample: Sample, what: str) -> Sample:
    if sample.code != 0:
        raise RuntimeError(f"{what} exited {sample.code}: {sample.err.strip()[-500:]}")
    return sample


async def prepare(tree: Tree, address: str, rounds: int) -> None:
    """The tree's finished run and its runs paused at review; the first command starts its worker."""
    env = tree.environment()
    run = ["run", "--no-wait", "--max-steps", "1", QUESTION]
    checked(timed(tree.starter(*run, "--auto-accept", "--id", DONE), tree.root, env), f"{tree.label}: run")
    paused = [review_id(kind, n) for n in range(rounds) for kind in ("cli", "cold", "api")]
    for run_id in paused:
        checked(timed(tree.starter(*run, "--id", run_id), tree.root, env), f"{tree.label}: run")
    client = await Client.connect(address, namespace=tree.env["TEMPORAL_NAMESPACE"])
    deadline = time.monotonic() + 300
    while not await _ready(client, paused):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{tree.label}: the runs did not reach their review within 300 s")
        await asyncio.sleep(0.5)


async def _ready(client: Client, paused: list[str]) -> bool:
    if (await client.get_workflow_handle(DONE).describe()).status != WorkflowExecutionStatus.COMPLETED:
        return False
    for run_id in paused:
        _, awaiting = indexed_place((await client.get_workflow_handle(run_id).describe()).typed_search_attributes)
        if awaiting != "plan_feedback":
            return False
    return True


@contextmanager
def api_server(tree: Tree) -> Iterator[int]:
    """``starter.py serve`` for the tree, on a free port; stopped on leaving."""
    port = free_port()
    log = (tree.home / "serve.log").open("ab")
    process = subprocess.Popen([PYTHON, str(tree.root / "starter.py"), "serve", "--port", str(port)], cwd=tree.root,
                               env=tree.environment(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=120)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def api_call(port: int, method: str, path: str, body: object | None = None) -> float:
    """One request's wall time, from sending it to its whole answer (which must be a 200)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    began = time.perf_counter()
    connection.request(method, path, body=None if body is None else json.dumps(body),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = response.read()
    spent = time.perf_counter() - began
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status} {answer[:300]!r}")
    return spent


def api_round(port: int, round_number: int) -> dict[str, float]:
    api_call(port, "GET", "/api/runs")  # the page's first load: its connection and caches are not timed
    return {"GET /api/runs": api_call(port, "GET", "/api/runs"),
            "GET /api/runs/ID": api_call(port, "GET", f"/api/runs/{DONE}"),
            "POST /api/runs/ID/review": api_call(port, "POST", f"/api/runs/{review_id('api', round_number)}/review",
                                                 {"accept": True})}


def one_round(tree: Tree, address: str, port: int, round_number: int,
              walls: dict[str, list[float]], cpus: dict[str, list[float]]) -> None:
    env = tree.environment()
    cold = tree.environment({SWITCH: "off"})
    commands = {**cli_commands(tree, round_number), **cli_commands(tree, round_number, cold=True),
                **temporal_commands(tree, address)}
    for name, argv in commands.items():
        sample = checked(timed(argv, tree.root, cold if name.endswith("(cold)") else env), f"{tree.label}: {name}")
        walls[name].append(sample.wall)
        cpus[name].append(sample.cpu + served_cpu(tree, sample))
    for name, spent in api_round(port, round_number).items():
        walls[name].append(spent)


def served_cpu(tree: Tree, sample: Sample) -> float:
    """The CPU time of the child that served ``sample``'s command, from its server's log (0 when it ran
    in its own process). The client's own is in ``sample``; the child is the server's, not ours."""
    logs = list(Path(tree.env["XDG_RUNTIME_DIR"]).glob("deerflow-cli-*/*.log"))
    lines = logs[0].read_text().splitlines() if logs else []
    if sample.cpu > SERVED_CLIENT_CPU or not lines or not lines[-1].endswith(" s CPU"):
        return 0.0
    return float(lines[-1].rsplit(", ", 1)[1].split()[0])


def report(chosen: list[Tree], walls: Readings, cpus: Readings) -> None:
    labels = [tree.label for tree in chosen]
    print("\nmedian wall s (CPU s) [x temporal's]; " + " / ".join(labels))
    names = [name for name in walls[labels[0]] if not name.startswith("temporal")]
    for name in [*names, "temporal describe", "temporal list"]:
        cells = []
        for label in labels:
            wall = median(walls[label][name])
            cell = f"{wall:.3f}" + (f" ({median(cpus[label][name]):.3f})" if cpus[label].get(name) else "")
            against = AGAINST.get(name.removesuffix(" (cold)"))
            if against:
                cell += f" [x{wall / median(walls[label]['temporal ' + against]):.1f}]"
            cells.append(cell)
        print(f"  {name:<26} " + " / ".join(cells) + _target(name, walls[labels[0]]))


def _target(name: str, walls: dict[str, list[float]]) -> str:
    target = TARGETED.get(name)
    if target is None:
        return ""
    wall = median(walls[name])
    if target == FAST_TARGET:
        return f"   target <= {target} s: {'met' if wall <= target else 'missed'}"
    times = wall / median(walls["temporal " + AGAINST[name]])
    met = wall <= target or times <= TEMPORAL_TIMES
    return f"   target <= {target} s or x{TEMPORAL_TIMES:.0f}: {'met' if met else 'missed'}"


async def main() -> None:
    parser = ab_parser(__doc__, rounds=5)
    args = parser.parse_args()
    begin("CLI and API latency against temporal's CLI")
    with tempfile.TemporaryDirectory(prefix="cli-bench-") as scratch:
        workdir = Path(scratch)
        chosen = trees(args.baseline, workdir)
        namespaces = [f"cli-bench-{n}" for n in range(len(chosen))]
        server = DevServer(workdir / "temporal.db", [arg for ns in namespaces for arg in ("--namespace", ns)]).start()
        try:
            for tree, namespace in zip(chosen, namespaces, strict=True):
                tree.home.mkdir(parents=True)
                runtime_folder = workdir / f"run-{namespace}"  # the tree's own command server
                runtime_folder.mkdir(mode=0o700)
                tree.env.update({"DEERFLOW_EMBEDDED_ADDRESS": server.address, "TEMPORAL_NAMESPACE": namespace,
                                 "DEERFLOW_UI_PORT": str(free_port()), "XDG_RUNTIME_DIR": str(runtime_folder)})
                await prepare(tree, server.address, args.rounds)
            await measure(chosen, server.address, args.rounds)
        finally:
            for tree in chosen:
                timed(tree.starter("down"), tree.root, tree.environment())
            server.stop()
    print(f"end: {load_note()}")


async def measure(chosen: list[Tree], address: str, rounds: int) -> None:
    walls: Readings = {tree.label: defaultdict(list) for tree in chosen}
    cpus: Readings = {tree.label: defaultdict(list) for tree in chosen}
    with api_server(chosen[0]) as first, (api_server(chosen[1]) if len(chosen) > 1 else _none()) as second:
        ports = {chosen[0].label: first, **({chosen[1].label: second} if second else {})}
        for tree in chosen:  # bytecode compiled, caches filled and the command server up before timing
            for argv in cli_commands(tree, 0).values():
                if "review" not in argv:
                    timed(argv, tree.root, tree.environment())
            await served_soon(tree)
        for round_number in range(rounds):
            order = chosen if round_number % 2 == 0 else list(reversed(chosen))
            for tree in order:
                one_round(tree, address, ports[tree.label], round_number, walls[tree.label], cpus[tree.label])
            print(f"round {round_number + 1}/{rounds} done ({load_note()})", flush=True)
    report(chosen, walls, cpus)


async def served_soon(tree: Tree) -> None:
    """Wait for the tree's command server (started by the first served command) to listen; a tree of
    before the server has none, and is measured as it is."""
    if (tree.root / "cli" / "command_server.py").exists():
        await command_server_up(Path(tree.env["XDG_RUNTIME_DIR"]))


@contextmanager
def _none() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    run_main(main())
