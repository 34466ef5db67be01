"""One verifying TLS context per kind of client, built once per process.

Why: building a context loads the CA bundle, tens of milliseconds of CPU (41.6 ms a crawl was
measured, bench/README.md, issue #23) that every client or crawl paid before its first byte. A
context is safe to share between connections and threads; each caller still gets its own client.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def verifying_context(*, trust_env: bool = True) -> ssl.SSLContext:
    """httpx's default verifying context; ``trust_env`` False ignores ``SSL_CERT_FILE`` and the like
    (the crawler, whose every setting is its own)."""
    return httpx.create_ssl_context(trust_env=trust_env)


def warm() -> None:
    """Build every context now, at worker start: a first crawl or model call would load the CA bundle
    on a run's critical path (about 50 ms of CPU each)."""
    verifying_context()
    verifying_context(trust_env=False)
