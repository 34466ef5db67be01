"""Loaded by a bench's worker process (``PYTHONPATH=bench/loopback_only``): names resolve on loopback only.

Why: a real model asks ``crawl_tool`` for any URL it makes up, and the crawler resolves the host
before its guards refuse it, which would send a DNS query off the machine. Here every name that is
not loopback fails at once, as an unknown host does, so a bench run never leaves 127.0.0.0/8.

The names in ``BENCH_LOOPBACK_NAMES`` (comma-separated; ``bench/corpus_site.py``'s corpus host)
resolve to 127.0.0.1 and nowhere else: the bench serves those sites there. The crawler still
refuses them as loopback unless the operator allows them (``DEERFLOW_CRAWL_ALLOW_HOSTS``).
"""

from __future__ import annotations

import ipaddress
import os
import socket

_resolve = socket.getaddrinfo
_ON_LOOPBACK = frozenset(name.strip().lower() for name in os.environ.get("BENCH_LOOPBACK_NAMES", "").split(",")
                         if name.strip())


def _loopback_only(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and name.lower().rstrip(".") in _ON_LOOPBACK:
        return _resolve("127.0.0.1", *args, **kwargs)
    try:
        loopback = name is None or ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = name == "localhost"
    if not loopback:
        raise socket.gaierror(socket.EAI_NONAME, f"{name}: not resolved (bench: loopback only)")
    return _resolve(host, *args, **kwargs)


socket.getaddrinfo = _loopback_only
