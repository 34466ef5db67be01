"""Process exit that sidesteps a Temporal SDK crash at interpreter shutdown.

The SDK's Rust core keeps threads that can call into CPython while it finalizes, which aborts
the process with "Fatal Python error: PyGILState_Release" (temporalio/sdk-python#300) and turns
a successful command into exit code -6. Once all output is flushed there is nothing left to
finalize that matters, so the process leaves without finalizing.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    # Skipping finalization skips the trace exporter's own flush too. A process that never imported
    # runtime.tracing has no traces (and ``--version`` need not import it, and the settings, to learn so).
    tracing = sys.modules.get("runtime.tracing")
    if tracing is not None:
        tracing.flush_traces()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
