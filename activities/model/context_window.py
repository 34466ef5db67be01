"""The model's context window: from settings, else from the provider, else from the model's name.

A model name the product does not know (a GGUF path on llama-server) used to get the 32k default,
and the server's 400 ended the run although it said the real window. Two sources fix that:

* ``GET /v1/models``: llama-server reports the server's window as ``meta.n_ctx``, vLLM as
  ``max_model_len``. Read once per worker, endpoint and model, and cached (also when absent).
* a context-overflow 400 names the window (llama-server: ``exceed_context_size_error`` with
  ``n_ctx`` and ``n_prompt_tokens``; OpenAI and vLLM: "maximum context length is N tokens"). The
  chat activity re-trims once to it, and remembers it for the worker's later calls.

``TOKEN_LIMIT`` (or conf.yaml's ``token_limit``) is the operator's word and always wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.model.context_budget import token_limit_for
from activities.support.tls import verifying_context
from config.groups.model import ModelEndpoint
from config.settings import Settings

MODELS_TIMEOUT_SECONDS = 5.0
_MAXIMUM = re.compile(r"maximum context length is (\d+)", re.IGNORECASE)
_PROMPT = re.compile(r"(?:resulted in|requested) (\d+) tokens", re.IGNORECASE)


@dataclass(frozen=True)
class Overflow:
    """A provider's context-overflow refusal: the window it names and the prompt's real size, if said."""

    message: str
    window: int | None
    prompt_tokens: int | None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def overflow_of(error: openai.APIStatusError) -> Overflow | None:
    """The overflow ``error`` reports, or None when it is another error."""
    if error.status_code != 400:
        return None
    body = error.body if isinstance(error.body, dict) else {}
    inner = body.get("error", body)
    inner = inner if isinstance(inner, dict) else {}
    message = str(inner.get("message") or error.message)
    llama = inner.get("type") == "exceed_context_size_error"
    if not llama and inner.get("code") != "context_length_exceeded" and not _MAXIMUM.search(message):
        return None
    window = _positive(inner.get("n_ctx")) if llama else None
    prompt = _positive(inner.get("n_prompt_tokens")) if llama else None
    if window is None and (match := _MAXIMUM.search(message)):
        window = int(match.group(1))
    if prompt is None and (match := _PROMPT.search(message)):
        prompt = int(match.group(1))
    return Overflow(message=message, window=window, prompt_tokens=prompt)


def retrim_limit(overflow: Overflow, estimated_tokens: int) -> int | None:
    """The limit to trim to after ``overflow``: its window, scaled down by how far the offline
    estimate (``estimated_tokens`` for the refused request) fell short of the provider's count."""
    if overflow.window is None:
        return None
    if overflow.prompt_tokens and estimated_tokens and overflow.prompt_tokens > estimated_tokens:
        return max(1, overflow.window * estimated_tokens // overflow.prompt_tokens)
    return overflow.window


def context_exceeded(overflow: Overflow, window: int, retried: bool) -> ApplicationError:
    """The final failure: what the provider said, and the setting that fixes it."""
    done = "even after trimming to the window it named" if retried else "and named no window to trim to"
    return ApplicationError(
        f"The request exceeds the model's context window ({overflow.message}), {done}; it was trimmed to "
        f"{window} tokens. Set TOKEN_LIMIT (or token_limit in conf.yaml) to the model's context window, "
        "or give the model a larger one.",
        type="ModelContextExceeded", non_retryable=True)


def _reported_window(listing: Any, model: str) -> int | None:
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        return None
    entries = [entry for entry in entries if isinstance(entry, dict)]
    named = [entry for entry in entries if entry.get("id") == model] or (entries if len(entries) == 1 else [])
    for entry in named:
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        window = _positive(meta.get("n_ctx")) or _positive(entry.get("max_model_len"))
        if window is not None:
            return window
    return None


class ContextWindows:
    """The worker's known windows by (endpoint, model): reported by ``/v1/models`` or learned from
    an overflow. None is cached too, so a provider that reports nothing is asked once."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], int | None] = {}

    async def window(self, settings: Settings, model: str, tier: str = "basic") -> int:
        """The window to budget for: TOKEN_LIMIT, else the provider's (``tier``'s own endpoint),
        else inferred from the name."""
        return await self._window(settings, model, tier, keep_failure=True)

    async def ask_ahead(self, settings: Settings, tier: str) -> int:
        """At worker start: ask ``tier``'s provider now, so that no run's first turn waits for the
        round trip (against a hosted provider a new connection, its TLS handshake and the model
        list, once per tier and worker). Only an answer is kept: a provider not up yet, or refusing
        the list, is asked again by the first turn, as it would have been. Returns the window
        known so far."""
        return await self._window(settings, settings.model_name(tier), tier, keep_failure=False)

    async def _window(self, settings: Settings, model: str, tier: str, keep_failure: bool) -> int:
        if settings.token_limit is not None:
            return token_limit_for(model, settings.token_limit)
        key = _key(settings, model, tier)
        if key not in self._known:
            try:
                self._known[key] = await _ask_provider(settings.model_endpoint(tier), model)
            except (httpx.HTTPError, ValueError):
                if keep_failure:
                    self._known[key] = None
        return token_limit_for(model, self._known.get(key))

    def learn(self, settings: Settings, model: str, window: int, tier: str = "basic") -> None:
        self._known[_key(settings, model, tier)] = window


def _key(settings: Settings, model: str, tier: str) -> tuple[str, str]:
    return settings.model_endpoint(tier).base_url or "", model


async def _ask_provider(endpoint: ModelEndpoint, model: str) -> int | None:
    """The window ``GET /models`` reports for ``model`` (None: the list has none); an HTTP failure
    or a body that is not JSON is raised, logged."""
    base = (endpoint.base_url or "https://api.openai.com/v1").rstrip("/")
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        # The shared context: building one per client loads the CA bundle, ~55 ms of a first call.
        verify = verifying_context() if endpoint.verify_ssl else False
        async with httpx.AsyncClient(timeout=MODELS_TIMEOUT_SECONDS, verify=verify) as client:
            response = await client.get(f"{base}/models", headers=headers)
            response.raise_for_status()
            window = _reported_window(response.json(), model)
    except (httpx.HTTPError, ValueError) as error:
        activity.logger.info("The provider's model list gave no context window (%s)", type(error).__name__)
        raise
    if window is not None:
        activity.logger.info("The provider reports a %d-token context window for %s", window, model)
    return window
