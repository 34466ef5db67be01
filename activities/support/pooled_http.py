"""One pooled HTTP client per event loop and provider endpoint, for providers a worker calls again
and again (the search providers, RAGFlow, the speech endpoint).

Why: a client per call opened a new connection per call, and to an https provider a new TLS
handshake: one or two round trips and a certificate chain check on the event loop before every
search, retrieval or spoken line. A kept client reuses its open connections (httpx's pool), kept
idle for :data:`KEEPALIVE_SECONDS` so that the searches of a research step, a model turn apart,
still find theirs open. On loopback, without TLS, a search's own time in the worker went from 3.3 to 1.7 ms
(bench/README.md, issue #23).

Why per event loop: a client's connections belong to the loop that opened them. A worker has one
loop; a process that runs several (``asyncio.run`` twice, a test session) gets a client for each.
A loop keeps at most :data:`MAX_CLIENTS_PER_LOOP` (endpoints and keys are the operator's, so a
worker has a handful); past that the oldest is dropped, not closed, since a call may still be
using it, and its connections close with it when it is collected.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Hashable
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx

from activities.support.kept import kept
from activities.support.tls import verifying_context

KEEPALIVE_SECONDS = 30.0  # under the idle timeouts of common front ends (nginx 75 s, cloud balancers 60 s)
MAX_CLIENTS_PER_LOOP = 16

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, httpx.AsyncClient]] = (
    weakref.WeakKeyDictionary())


def build_client(**options: Any) -> httpx.AsyncClient:
    """A kept client: the process's verifying context, httpx's default pool sizes with idle
    connections kept for :data:`KEEPALIVE_SECONDS`, no cookies, and ``options`` (e.g. event hooks).
    It has no key, header or timeout of its own: each request carries them.

    No cookies: a client per call started with an empty jar; a kept one would send a provider's
    cookies back on every later call, of every run this worker serves.
    """
    return httpx.AsyncClient(
        verify=verifying_context(),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_SECONDS),
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        **options)


def pooled_client(key: Hashable, build: Callable[[], httpx.AsyncClient] = build_client) -> httpx.AsyncClient:
    """The running loop's client for ``key``, built with ``build`` the first time (or once closed).

    ``key`` must hold everything ``build`` puts into the client (its endpoint, its key header), so
    that a client is never shared by two configurations.
    """
    clients = _clients.setdefault(asyncio.get_running_loop(), {})
    if key in clients and clients[key].is_closed:
        del clients[key]
    return kept(clients, key, build, MAX_CLIENTS_PER_LOOP)
