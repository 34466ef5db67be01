"""The verifying TLS contexts a worker builds (activities/support/tls.py): the model calls' trusts the
environment's CA certificates, the crawler's never does, and where the environment names none they
are one context, so the CA bundle is loaded once (issue #45: a worker's start)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import certifi
import pytest

from activities.support.tls import CA_ENVIRONMENT, verifying_context


@pytest.fixture(autouse=True)
def _fresh_contexts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in CA_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    verifying_context.cache_clear()
    yield
    verifying_context.cache_clear()


def test_without_ca_settings_the_model_calls_and_the_crawler_share_one_context() -> None:
    assert verifying_context() is verifying_context(trust_env=False)


@pytest.mark.parametrize("name", CA_ENVIRONMENT)
def test_ca_settings_give_the_model_calls_a_context_of_their_own(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    bundle = certifi.where()
    monkeypatch.setenv(name, bundle if name == "SSL_CERT_FILE" else str(Path(bundle).parent))
    assert verifying_context() is not verifying_context(trust_env=False)
