"""When a process started, from ``/proc``: what tells a live process from a dead one with its pid reused.

The front door (runtime/embedded.py) and the in-flight journals (hosting/inflight_journal.py)
both record a pid with this stamp and later ask whether that very process still runs.
"""

from __future__ import annotations

from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``).

    None once it is gone; a zombie counts as gone, it runs nothing. Raises OSError when ``/proc``
    exists but cannot be read for it. The command name (field 2) may hold spaces and parentheses,
    so fields are counted after its last ")".
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])
