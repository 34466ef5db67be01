"""One verifying TLS context per kind of client, built once per process, trusting what the model calls trust.

Why one per process: building a context loads the CA certificates, tens of milliseconds of CPU (41.6
ms a crawl was measured, bench/README.md, issue #23) that every client or crawl paid before its first
byte. A context is safe to share between connections and threads; each caller still gets its own
client. (httpcore sets the context's ALPN protocols on each connection: no client of ours asks for
HTTP/2, so every one sets the same.)

Why the model calls' trust: the openai SDK (the model calls) verifies against the system's CA store,
or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, through ``httpx2``; httpx's own default is certifi's bundle.
Our requests to the same endpoint (its context window, llama-server's chat template) verified with
certifi's, so a company CA installed in the system's store let the model calls through and failed
those: the worker budgeted for a window it guessed. Every context here is built by ``httpx2``'s own
``create_ssl_context``, as the SDK's are, so an operator's CA counts for every request or for none.
"""

from __future__ import annotations

import functools
import os
import ssl

# What the SDK reads, where it trusts the environment, for the CA certificates to verify against.
CA_ENVIRONMENT = ("SSL_CERT_FILE", "SSL_CERT_DIR")


@functools.cache
def verifying_context(*, trust_env: bool = True) -> ssl.SSLContext:
    """The model calls' verifying context; ``trust_env`` False ignores ``SSL_CERT_FILE`` and the like
    (the crawler, whose every setting is its own). Where the environment names no CA certificates,
    both verify against the system's store: one context, so one load of it (27 ms of a worker's start)."""
    if trust_env and not any(os.environ.get(name) for name in CA_ENVIRONMENT):
        return verifying_context(trust_env=False)
    # Here, not at the top: the openai SDK's HTTP stack, which a worker otherwise imports only in its
    # preload, after it polls; every worker imports this module before it polls.
    import httpx2

    return httpx2.create_ssl_context(trust_env=trust_env)


def warm() -> None:
    """Build every context now, at worker start: a first crawl or model call would load the CA
    certificates on a run's critical path (about 50 ms of CPU each)."""
    verifying_context()
    verifying_context(trust_env=False)
