"""Built on first use and kept, the oldest dropped past a limit: how a worker keeps its clients.

Why one helper: the model turn's ``ChatOpenAI`` clients (``activities/model/clients.py``) and the
providers' HTTP clients (``activities/support/pooled_http.py``) follow the same rule, and a bound
that differs between them by accident would be a leak in one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def kept(cache: dict[K, V], key: K, build: Callable[[], V], limit: int) -> V:
    """``cache[key]``, built with ``build`` if absent; at ``limit`` entries the oldest goes first."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= limit:
            del cache[next(iter(cache))]
        value = cache[key] = build()
    return value
