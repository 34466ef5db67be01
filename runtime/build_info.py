"""Which build a process runs: the package version and a digest of the code it loaded.

Two images of one version can hold different code (a rebuilt tag, a patched file), so a version
alone does not tell builds apart. The digest is over the product's own files (their paths and
contents, never their times), so the same code gives the same digest in every checkout and image.
The front door compares it to restart a background worker whose code changed (runtime/embedded.py);
``--version`` prints it; the worker puts both in its identity (which history records for every
workflow task and activity attempt) and on its metrics.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DISTRIBUTION = "deerflow-temporal"
# Where the product's code is: a checkout, or site-packages once installed (both hold the same names).
ROOT = Path(__file__).resolve().parent.parent
# The product's top-level packages and scripts: what a process of it runs (never tests or benches).
# tests/test_build_info.py checks these against pyproject.toml's packages and modules.
PACKAGES = ("activities", "cli", "config", "hosting", "offline", "prompts", "runtime", "sandbox", "server", "storage",
            "workflows")
MODULES = ("starter.py", "worker.py")
SHORT = 12  # digits of the digest shown in identities, labels and --version


def version() -> str:
    """The installed package's version; ``unknown`` for sources that were never installed.

    importlib.metadata is imported here: a third of ``--version``'s and ``--help``'s imports, which
    ``--help`` never needs."""
    import importlib.metadata

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _code_files() -> list[str]:
    """The product's files under :data:`ROOT`, as paths relative to it, sorted: what the digest and the
    stamp cover. Strings, not ``Path``: building 400 ``Path`` objects was most of the stamp's cost, and
    every command that checks its worker pays it (the command server, for each command it serves)."""
    paths = list(MODULES)
    for package in PACKAGES:
        for folder, folders, files in os.walk(os.path.join(ROOT, package)):
            folders[:] = sorted(name for name in folders if name != "__pycache__" and not name.startswith("."))
            relative = os.path.relpath(folder, ROOT)
            paths.extend(os.path.join(relative, name) for name in files if not name.endswith((".pyc", ".pyo")))
    return sorted(paths)


def code_digest() -> str:
    """SHA-256 over the product's files under :data:`ROOT` (relative path and content of each)."""
    digest = hashlib.sha256()
    for relative in _code_files():
        path = ROOT / relative
        if path.is_file():
            digest.update(f"{relative}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def code_stamp() -> str:
    """SHA-256 over the product files' paths, sizes and modification times, reading no file.

    Not an identity (times are a checkout's own), but this checkout's cheap check that its files are
    those of an earlier stamp: the front door records it beside a worker's digest and compares it
    first. Reading and hashing the 400 files for the digest was 0.015 s of CPU, and three times that
    of wall time, of every command that checks its worker (issue #45)."""
    stamp = hashlib.sha256()
    root = str(ROOT)
    for relative in _code_files():
        try:
            found = os.stat(os.path.join(root, relative))
        except OSError:
            continue
        stamp.update(f"{relative}\0{found.st_size}\0{found.st_mtime_ns}\n".encode())
    return stamp.hexdigest()


def build_label(digest: str | None = None) -> str:
    """``deerflow-temporal 0.1.0 (code 1a2b3c4d5e6f)``: what ``--version`` prints."""
    return f"{DISTRIBUTION} {version()} (code {(digest or code_digest())[:SHORT]})"


def worker_identity(digest: str) -> str:
    """``PID@host deerflow-temporal/VERSION+CODE``: the SDK's own ``PID@host`` first, which the front
    door matches to tell its worker's polls from a dead one's (runtime/embedded.py: process_polls)."""
    return f"{os.getpid()}@{socket.gethostname()} {build_id(digest)}"


def build_id(digest: str) -> str:
    """``deerflow-temporal/VERSION+CODE``: the build ID a worker gives Temporal (history records it with
    each workflow task). Given, it spares the SDK deriving one by hashing the bytecode of every module
    the process has loaded, about 1,200 of them: a tenth of a second of a worker's start (issue #45)."""
    return f"{DISTRIBUTION}/{version()}+{digest[:SHORT]}"


def metric_labels(digest: str) -> dict[str, str]:
    """Labels on every series a worker exports, so dashboards split by build during a rollout."""
    return {"deerflow_version": version(), "deerflow_code": digest[:SHORT]}


class _VersionAction(argparse.Action):
    """``--version``, computed only when asked (hashing the code costs a few milliseconds)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the package version and code digest, and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(build_label())
        sys.stdout.flush()
        parser.exit()


def add_version_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action=_VersionAction)
