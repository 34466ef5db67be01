"""What a process of ours does before its imports, so that they cost only what they must (issue #45).

Two costs every process paid at its start without using them:
- pydantic's plugin discovery: the first model that builds its validator lists every installed
  distribution's entry points (about 190 of them here), 0.04 s of CPU, to find plugins no process of
  ours uses. ``PYDANTIC_DISABLE_PLUGINS`` is pydantic's documented switch; an operator who sets it
  (to an empty value, or to a list of plugin names) keeps that choice, and the processes we start
  inherit ours.
- the garbage collector, run every few hundred new objects while modules build their classes: 150
  collections over a command's 700 modules, 0.04 s of a command's 0.65 s of CPU, none of which
  frees anything (an import's objects live as long as the process). The worker keeps it off until
  it is warm (worker.py); a command, while it imports.

Imports only the standard library's ``gc`` and ``os``: ``--help`` and ``--version`` load this too.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager

PLUGIN_SWITCH = "PYDANTIC_DISABLE_PLUGINS"


def skip_pydantic_plugin_discovery() -> None:
    """Tell pydantic (and the processes started from here) that no plugin is to be looked for,
    unless the operator chose otherwise. Call before the first model builds its validator."""
    os.environ.setdefault(PLUGIN_SWITCH, "__all__")


@contextmanager
def collection_paused() -> Iterator[None]:
    """No garbage collection inside the block (a command's imports); as it was, after, with what the
    block built frozen (``gc.freeze``), as the worker does: re-enabled over an unfrozen heap, the
    collector went through all of it again, 25 times, for more CPU than it had spent before."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()
