"""The garbage collector paused while a pytest process imports, as our own processes do
(``runtime/process_start.py``), and back on, over a frozen heap, before the first test.

Each of ``make test``'s pytest processes imports every test module and what they import (the
model, MCP, S3 and property-testing libraries) before its first test. With the collector running
every few hundred new objects over that growing heap, and freeing nothing (a module lives as long as
the process), a process's collection cost 13-15 s of CPU here, 10 s without. Frozen, the imported
objects are also never walked again by the collections between the in-process tests.

Loaded early (``-p`` in pyproject.toml's addopts) so that the pause covers the conftest's imports too.
"""

from __future__ import annotations

import contextlib

import pytest

from runtime.process_start import collection_paused

_imports = contextlib.ExitStack()


def pytest_load_initial_conftests() -> None:
    """Before the conftests and the test modules are imported."""
    _imports.enter_context(collection_paused())


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop() -> None:
    """Collection is over (xdist's controller collects nothing, and gets here too): collect again."""
    _imports.close()
