"""Task queue names, one per kind of work. Pure, so the workflow can import it.

Every queue name is derived from the queue the run itself is on, so a deployment on another main
queue gets its own set. Why four kinds:

- ``main``: the workflow itself, plus every activity for runs recorded before the split (they keep
  scheduling there, see ``workflows/calls/activity_options.py``);
- ``model``: ``chat``, the model provider's key and the provider's rate limits;
- ``tools``: web search, crawl, local retrieval and MCP, the search keys and outbound traffic;
- ``sandbox``: the coder's Python, served by a worker that holds no key and has the privileges the
  sandbox's namespaces need (the keyed workers never run model-written code).

Operators scale and isolate each kind separately (``worker.py --queues model``), and each worker
bounds its own concurrency per queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workflows.contracts.research import TASK_QUEUE

QueueKind = Literal["main", "model", "tools", "sandbox"]
QUEUE_KINDS: tuple[QueueKind, ...] = ("main", "model", "tools", "sandbox")
_SUFFIXES: dict[QueueKind, str] = {"main": "", "model": "-model", "tools": "-tools", "sandbox": "-sandbox"}


@dataclass(frozen=True)
class QueueRouting:
    """Which kinds of work a run schedules on its main queue rather than their own.

    A research run takes it from its config (``RunConfig.main_queue_kinds``: the kinds the worker
    that read the config serves beside the workflow) and hands it to every activity it starts.
    Workflows without a run config, and a research run before its config arrives, keep every kind
    on its own queue (``OWN_QUEUES``).
    """

    main_queue_kinds: frozenset[str] = frozenset()


OWN_QUEUES = QueueRouting()


def queue_name(kind: QueueKind, main_queue: str = TASK_QUEUE) -> str:
    """The queue ``kind`` of work runs on, for runs on ``main_queue``."""
    return main_queue + _SUFFIXES[kind]
