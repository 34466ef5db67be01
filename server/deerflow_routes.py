"""DeerFlow's own endpoints, as its web UI calls them: the chat stream and its cancel, the
configuration, the document resources and uploads, and the prompt enhancer."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from config.resources import SUPPORTED_SUFFIXES, resolve, utf8_named
from offline.providers import offline_parts
from runtime import research_client
from runtime.run_memo import started_by
from server.access import Act, Principal, principal
from server.chat import TurnWatch
from server.enhance import enhance
from server.security import RequestError, read_json
from server.services import endpoint, services
from server.threads import checked_thread_id, latest_run
from server.uploads import Uploads

MAX_RESOURCES = 200


async def chat_stream(request: Request) -> Response:
    shared = services(request)
    try:
        body: Any = await read_json(request, shared.body_limit)
    except RequestError as error:
        body = error  # reported as the stream's error event, as DeerFlow's UI expects
    thread = str(body.get("thread_id", ""))[:64] if isinstance(body, dict) else ""
    who, watch = principal(request), TurnWatch()
    return shared.event_stream(shared.chat.stream(body, shared.keep_alive, who, watch), thread,
                               on_disconnect=lambda: shared.chat.client_left(watch, who))


async def chat_cancel(request: Request) -> Any:
    shared = services(request)
    body = await read_json(request, shared.body_limit)
    thread = checked_thread_id(str(body.get("thread_id", ""))) if isinstance(body, dict) else ""
    handle = await latest_run(shared.client, shared.settings.web_thread_prefix, thread)
    who = principal(request)
    who.check(Act.CANCEL, await started_by(await handle.describe()))
    await research_client.cancel(handle, who.actor)
    return {"cancelled": handle.id}


async def config(request: Request) -> Any:
    settings = services(request).settings
    # Every token (viewers too) reads this: a key the operator used as a model name is masked.
    return {"rag": {"provider": settings.rag_provider or None},
            "models": {"basic": [settings.shown("BASIC_MODEL", settings.basic_model)],
                       "reasoning": [settings.shown("REASONING_MODEL", settings.reasoning_model)]
                       if settings.reasoning_model else []},
            "offline_demo": any(offline_parts(settings)),
            # Our page's: the operator's budgets, for its budget fields' hints.
            "budgets": {"tokens": settings.run_token_budget, "tokens_max": settings.run_token_budget_max,
                        "cost_usd": settings.run_cost_budget_usd, "cost_usd_max": settings.run_cost_budget_usd_max}}


async def rag_resources(request: Request) -> Any:
    query = request.query_params.get("query", "").lower()
    return {"resources": await asyncio.to_thread(_resources, services(request).uploads, principal(request), query)}


async def rag_upload(request: Request) -> Any:
    return await services(request).uploads.store(request, principal(request))


async def prompt_enhance(request: Request) -> Any:
    shared = services(request)
    return await enhance(shared.client, await read_json(request, shared.body_limit), principal(request).actor)


def _resources(uploads: Uploads, who: Principal, query: str) -> list[dict[str, str]]:
    """Documents under the operator's resource roots that ``who`` may use (others' uploads are not
    listed), as DeerFlow's Resource JSON (a ``local://`` URI, no server path: ``Uploads.listed``)."""
    found: list[dict[str, str]] = []
    policy = uploads.policy
    for root in policy.roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            if len(found) >= MAX_RESOURCES:
                return found
            # The name's checks first: a search for one name stats and resolves only the files it names.
            if query in path.name.lower() and path.suffix.lower() in SUPPORTED_SUFFIXES and utf8_named(path) \
                    and path.is_file() and policy.allows(real := path.resolve()) and uploads.may_use(real, who):
                listed = uploads.listed(real)
                if resolve(policy.path_text(listed["uri"])) == real:  # not shadowed by an earlier root's
                    found.append(listed)
    return found


ROUTES = [
    Route("/api/chat/stream", chat_stream, methods=["POST"]),
    Route("/api/chat/cancel", endpoint(chat_cancel), methods=["POST"]),
    Route("/api/config", endpoint(config), methods=["GET"]),
    Route("/api/rag/resources", endpoint(rag_resources), methods=["GET"]),
    Route("/api/rag/upload", endpoint(rag_upload), methods=["POST"]),
    Route("/api/prompt/enhance", endpoint(prompt_enhance), methods=["POST"]),
]
