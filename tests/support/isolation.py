"""What keeps the two pytest processes of ``pytest -n 2`` out of each other's way.

tests/test_python_sandbox.py finds the sandbox processes left on the machine, asserts there are
none and kills them. Tests of one module run in both processes at once, so without a pool of
sandbox uids and a temp directory per process each would see, and kill, the other's runs and
start-up probe (a probe killed that way refuses the sandbox for the rest of the session).
"""

from __future__ import annotations

import os
import tempfile

SANDBOX_UID_BASE = 64064  # above the default 64000, which tests/test_sandbox_deployment.py's worker keeps


def isolate_this_process() -> str:
    """Give this pytest process (and the workers it starts, who inherit the environment) its own
    sandbox uid pool and temp directory; returns the directory, for the caller to remove."""
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    os.environ["DEERFLOW_SANDBOX_UID_BASE"] = str(SANDBOX_UID_BASE + 64 * index)
    own_tmp = tempfile.mkdtemp(prefix=f"deerflow-tests-gw{index}-")
    os.chmod(own_tmp, 0o1777)  # like /tmp: processes of other uids started by tests use it too
    os.environ["TMPDIR"] = own_tmp
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    return own_tmp
