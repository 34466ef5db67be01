"""Loaded by a bench's worker process (``PYTHONPATH=bench/loopback_only``): names resolve on loopback only.

Why: a real model asks ``crawl_tool`` for any URL it makes up, and the crawler resolves the host
before its guards refuse it, which would send a DNS query off the machine. Here every name that is
not loopback fails at once, as an unknown host does, so a bench run never leaves 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
import socket

_resolve = socket.getaddrinfo


def _loopback_only(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    name = host.decode() if isinstance(host, bytes) else host
    try:
        loopback = name is None or ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = name == "localhost"
    if not loopback:
        raise socket.gaierror(socket.EAI_NONAME, f"{name}: not resolved (bench: loopback only)")
    return _resolve(host, *args, **kwargs)


socket.getaddrinfo = _loopback_only
