"""The verifying TLS contexts a worker builds (activities/support/tls.py): the model calls' trusts the
environment's CA certificates, the crawler's never does, and where the environment names none they
are one context, so the CA bundle is loaded once (issue #45: a worker's start). Both trust what the
openai SDK's own model calls trust: a CA that an operator installed in the system's store verifies a
request of ours to the model's endpoint as it verifies the model call."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import certifi
import pytest
from temporalio.testing import ActivityEnvironment

from activities.model.context_window import ContextWindows
from activities.model.llm import ModelActivities
from activities.model.tool_support import read_props
from activities.support.tls import CA_ENVIRONMENT, verifying_context
from config.settings import load_settings
from offline.model_server import FakeModelServer
from tests.support.chat_requests import COORDINATOR
from tests.support.tls_proxy import make_pki, serve_over_tls


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


async def test_a_ca_in_the_systems_store_verifies_the_model_call_and_our_requests_to_its_endpoint_alike(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint whose certificate a private CA signed, installed in the system's store (as an operator
    installs a company's CA) and absent from certifi's bundle. The model call verifies it (the SDK's
    context reads the system's store); so must the context window's and the chat template's requests
    to the same endpoint, or the worker budgets for a window it guessed and a template it did not read."""
    pki = make_pki(tmp_path / "pki")
    system = ssl.get_default_verify_paths()
    monkeypatch.setattr(ssl, "get_default_verify_paths",
                        lambda: system._replace(openssl_cafile=str(pki.ca.cert), openssl_capath=str(tmp_path)))
    server = FakeModelServer(api_key="k", n_ctx=7000, chat_template="{{ messages }}")
    base_url = serve_over_tls(server, pki.server)
    with server:
        (tmp_path / "conf.yaml").write_text(f"BASIC_MODEL:\n  base_url: {base_url}\n  model: m\n  api_key: k\n")
        settings = load_settings({"DEERFLOW_CONF": str(tmp_path / "conf.yaml"),
                                  "DEERFLOW_ENV_FILE": str(tmp_path / "absent.env")})
        response = await ActivityEnvironment().run(ModelActivities(settings).chat, COORDINATOR)
        assert response.message.tool_calls  # the SDK's call verified the endpoint
        assert await ContextWindows().window(settings, "m") == 7000
        assert (await read_props(base_url, verify=True)).get("chat_template") == "{{ messages }}"
