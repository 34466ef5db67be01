"""Task queue names. Pure, so the workflow can import it.

The coder's Python runs on its own queue, served by a sandbox worker that holds no model,
search or storage keys and has the privileges the sandbox's namespaces need; the main worker
(the keys, no privileges) never runs model-written code. The name is derived from the queue the
run itself is on, so a deployment on another queue gets its own sandbox queue too.
"""

from __future__ import annotations

from workflows.models import TASK_QUEUE

SANDBOX_QUEUE_SUFFIX = "-sandbox"


def sandbox_queue(main_queue: str) -> str:
    """The queue python_repl_tool runs on for runs on ``main_queue``."""
    return main_queue + SANDBOX_QUEUE_SUFFIX


SANDBOX_TASK_QUEUE = sandbox_queue(TASK_QUEUE)
