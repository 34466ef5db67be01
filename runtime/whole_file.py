"""Replacing a small file whole: the API server's announcement to local workers
(runtime/token_stream_format.py) and the kept tool-support verdicts (activities/model/kept_verdicts.py).

Why one helper: both are read by other processes at any moment (a worker as it starts), and both
may be written by two processes at once (two API servers, two workers on one home); each needs a
temporary file of its own beside the target, owner-only, then ``os.replace``, and the temporary
removed when the write fails.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def replace_whole(path: Path, text: str) -> None:
    """Make ``path`` hold ``text`` (owner-only), whole or not at all; an ``OSError`` leaves it as it was."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # 0o600, a name of its own
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
