"""Positive tool-support verdicts kept in the worker's home, so a restarted worker does not probe again.

Why: the verdict of ``activities/model/tool_support.py`` lives in the worker's memory. A worker that
replaces a dead one, or the new one of a deploy, knows none, and its first turn of a tier that ends
in text (a step's last turn) sends the probe first: one more model round trip on the resumed run's
path (``bench/crash_cost.py``'s kill during a search counted it). A worker started on the same home
(the embedded default's, or compose's volume) within the verdict's lifetime reads it here instead.

Only "tools work" is kept. A negative verdict, or one forgotten because it failed a run, removes
the entry, so that an operator who fixes the server and restarts the worker gets a fresh probe, as
before. Entries are named by a digest of the endpoint and model, never by the URL (which may carry
credentials). The file is a cache: unreadable, broken or unwritable, it is ignored and the probe runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from runtime.whole_file import replace_whole

FILENAME = "tool-support.json"
_log = logging.getLogger(__name__)


def digest(base_url: str, model: str) -> str:
    """The entry's name for an endpoint and model: stable across processes, and no URL in the file."""
    return hashlib.sha256(f"{base_url}\n{model}".encode()).hexdigest()[:32]


class KeptVerdicts:
    """The home's file of endpoints (by digest) whose tools were seen to work, and when (wall clock:
    it outlives the process), each for ``ttl`` seconds."""

    def __init__(self, home: Path, ttl: float, clock: Callable[[], float] = time.time) -> None:
        self.path = home / FILENAME
        self.ttl = ttl
        self.clock = clock
        self._written: dict[str, float] = {}  # what this process last wrote, so that it writes seldom

    def ages(self) -> dict[str, float]:
        """The unexpired entries, as seconds since each was seen."""
        now = self.clock()
        return {name: now - seen for name, seen in self._read().items() if 0 <= now - seen <= self.ttl}

    def record(self, name: str, calls: bool) -> None:
        """``name``'s tools work (kept; rewritten at most every quarter of ``ttl``) or do not (dropped)."""
        now = self.clock()
        if calls:
            if now - self._written.get(name, float("-inf")) < self.ttl / 4:
                return
            entries = self._read()
            entries[name] = self._written[name] = now
        else:
            self._written.pop(name, None)
            entries = self._read()
            if entries.pop(name, None) is None:
                return  # nothing kept: no write
        self._write(entries)

    def _read(self) -> dict[str, float]:
        try:
            loaded = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(loaded, dict):
            return {}
        return {name: float(seen) for name, seen in loaded.items()
                if isinstance(name, str) and isinstance(seen, int | float) and not isinstance(seen, bool)}

    def _write(self, entries: dict[str, float]) -> None:
        try:
            replace_whole(self.path, json.dumps(entries))  # whole: a worker may read it as it starts
        except OSError as error:
            _log.debug("tool-support verdicts not kept: %s", error)
