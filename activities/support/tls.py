"""One verifying TLS context per kind of client, built once per process.

Why: building a context loads the CA bundle, tens of milliseconds of CPU (41.6 ms a crawl was
measured, bench/README.md, issue #23) that every client or crawl paid before its first byte. A
context is safe to share between connections and threads; each caller still gets its own client.
(httpcore sets the context's ALPN protocols on each connection: no client of ours asks for HTTP/2, so
every one sets the same.)
"""

from __future__ import annotations

import functools
import os
import ssl

import httpx

# What httpx reads, where it trusts the environment, for the CA certificates to verify against.
CA_ENVIRONMENT = ("SSL_CERT_FILE", "SSL_CERT_DIR")


@functools.cache
def verifying_context(*, trust_env: bool = True) -> ssl.SSLContext:
    """httpx's default verifying context; ``trust_env`` False ignores ``SSL_CERT_FILE`` and the like
    (the crawler, whose every setting is its own). Where the environment names no CA certificates,
    both verify against certifi's bundle: one context, so one load of it (27 ms of a worker's start)."""
    if trust_env and not any(os.environ.get(name) for name in CA_ENVIRONMENT):
        return verifying_context(trust_env=False)
    return httpx.create_ssl_context(trust_env=trust_env)


def warm() -> None:
    """Build every context now, at worker start: a first crawl or model call would load the CA bundle
    on a run's critical path (about 50 ms of CPU each)."""
    verifying_context()
    verifying_context(trust_env=False)
