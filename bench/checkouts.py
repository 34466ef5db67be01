"""What the front-door benches share: a checkout's ``starter.py`` run as a user runs it, timed.

Each checkout (this tree and a baseline extracted with ``git archive``) runs with this tree's
virtualenv, in its own directory, with its own ``DEERFLOW_HOME`` and Temporal namespace: its
embedded stack keeps its own records and starts its own background worker, and neither tree's
commands see the other's runs or worker. Wall time and CPU time are both taken: CPU time (the
command's own, from ``getrusage``) moves little with the machine's load, wall time is what a person
waits, and both trees are measured in turns so that they see the same load.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import header

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


@dataclass(frozen=True)
class Sample:
    """One command: its wall and CPU seconds, exit code and output."""

    wall: float
    cpu: float
    code: int
    out: str
    err: str


@dataclass
class Tree:
    """A checkout whose front door is measured: its directory, label and environment."""

    label: str
    root: Path
    home: Path
    env: dict[str, str] = field(default_factory=dict)

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The bench's environment, as a user's shell has it, with this tree's home and settings.

        Bytecode is cached as in a plain checkout: a shell's ``PYTHONDONTWRITEBYTECODE`` is dropped
        (without it every command would compile every module it imports, every time).
        """
        inherited = {name: value for name, value in os.environ.items()
                     if name != "PYTHONDONTWRITEBYTECODE" and not name.startswith(("TEMPORAL_", "DEERFLOW_"))}
        return {**inherited, "DEERFLOW_HOME": str(self.home), **self.env, **(extra or {})}

    def starter(self, *args: str) -> list[str]:
        return [PYTHON, str(self.root / "starter.py"), *args]


def _reaped_cpu() -> float:
    """CPU time of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float = 120) -> Sample:
    """Run ``argv`` to its end; its wall time, and the CPU time of it and of the children it waited for."""
    cpu = _reaped_cpu()
    began = time.perf_counter()
    done = subprocess.run(list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    wall = time.perf_counter() - began
    return Sample(wall, _reaped_cpu() - cpu, done.returncode, done.stdout, done.stderr)


def load_note() -> str:
    """The load average now, to print beside each reading (``uptime``'s three figures)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def ab_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """A front-door bench's options: ``--rounds`` and ``--baseline`` (another checkout to compare with)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--baseline", type=Path, help="another checkout (git archive COMMIT | tar -x -C DIR)")
    return parser


def begin(title: str) -> None:
    """A bench's first lines: what it measures, when, and the load it starts under."""
    header(title)
    print(f"start: {load_note()}", flush=True)


def trees(baseline: Path | None, workdir: Path) -> list[Tree]:
    """This tree, and the baseline's when given, each with a home of its own under ``workdir``."""
    chosen = [Tree("this tree", REPO, workdir / "this")]
    if baseline is not None:
        chosen.append(Tree("baseline", baseline.resolve(), workdir / "baseline"))
    return chosen
