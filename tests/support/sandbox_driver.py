"""A stand-in worker process for tests/test_sandbox_deployment.py.

Started by the test under ``setpriv`` with the uid and capabilities of a docker-compose service,
it does what that service's worker does with python_repl_tool: the start-up self-check, then one
activity call per snippet read from stdin (a JSON list). It prints one JSON object: its own
credentials as the kernel sees them, the sandbox mode, and each call's result or error.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from config.settings import load_settings
from sandbox.activity import SandboxActivities
from workflows.contracts.tool_activities import PythonRequest

TIMEOUT_SECONDS = 3.0  # every attack ends well within it; one of them is stopped by it


def credentials() -> dict[str, Any]:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    caps = {name: status[name].strip() for name in ("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")}
    return {"uid": os.getuid(), "euid": os.geteuid(), "no_new_privs": status["NoNewPrivs"].strip(), **caps}


async def call(sandbox: SandboxActivities, code: str) -> dict[str, Any]:
    try:
        request = PythonRequest(code=code, timeout_seconds=TIMEOUT_SECONDS)
        result = await ActivityEnvironment().run(sandbox.python_repl_tool, request)
    except ApplicationError as error:
        return {"error": str(error), "type": error.type, "non_retryable": error.non_retryable}
    return result.model_dump()


async def main() -> None:
    snippets = json.loads(sys.stdin.read())
    sandbox = SandboxActivities(load_settings())  # from this process's environment, as the worker's
    mode = await sandbox.self_check()
    results = [await call(sandbox, code) for code in snippets]
    print(json.dumps({"credentials": credentials(), "mode": mode.name, "reason": mode.reason, "results": results}))


if __name__ == "__main__":
    asyncio.run(main())
