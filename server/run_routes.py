"""Our page's API over research runs (server/runs.py and server/run_lists.py do the work): list, start,
show, follow, inspect, review, answer, decide at the budget, cancel (one run, or every run a filter
matches) and fork (server/forks.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server import forks, sse
from server.access import Principal, principal, token_table
from server.runs import Runs
from server.security import read_json
from server.services import endpoint, services
from workflows.contracts.research import ReviewOutcome


async def me(request: Request) -> Any:
    """Who the page is signed in as (the token's holder) and whether it may start runs."""
    who = principal(request)
    return {"name": who.name, "role": who.role_label, "may_start": not who.read_only,
            "tokens": bool(token_table(services(request).settings))}


async def list_runs(request: Request) -> Any:
    """A page of runs, filtered (server/run_lists.py): ``?phase=&started_by=&…&page=``."""
    return await services(request).lists.overview(principal(request), request.query_params)


async def review_all(request: Request) -> Any:
    shared = services(request)
    return await shared.lists.review_all(await read_json(request, shared.body_limit), principal(request))


async def cancel_all(request: Request) -> Any:
    shared = services(request)
    return await shared.lists.cancel_all(await read_json(request, shared.body_limit), principal(request))


async def start_run(request: Request) -> Any:
    shared = services(request)
    return {"id": await shared.runs.start(await read_json(request, shared.body_limit), principal(request))}


async def show(request: Request) -> Any:
    return await services(request).runs.show(request.path_params["run"], principal(request))


async def inspection(request: Request) -> Any:
    """The run's timeline, with the forks of it the caller may see (the run's source is in its history)."""
    runs, run, who = services(request).runs, request.path_params["run"], principal(request)
    shown = await runs.inspection(run, who)  # checks that ``who`` may see the run first
    shown["forks"] = [{"workflow_id": found.workflow_id, "at": found.at}
                      for found in await forks.forks_seen_by(runs, run, who)]
    return shown


async def fork_run(request: Request) -> Any:
    shared = services(request)
    body = await read_json(request, shared.body_limit)
    return {"id": await forks.fork(shared.runs, request.path_params["run"], body, principal(request))}


async def list_forks(request: Request) -> Any:
    found = await forks.visible_forks(services(request).runs, request.path_params["run"], principal(request))
    return {"forks": [forks.listed(fork) for fork in found]}


async def run_events(request: Request) -> Response:
    shared = services(request)
    run = request.path_params["run"]
    await shared.runs.handle(run, principal(request))  # a refusal is a plain error before the stream starts
    after = request.query_params.get("after") or request.headers.get("last-event-id")
    return shared.event_stream(sse.with_keep_alive(shared.runs.events(run, after), shared.keep_alive), run)


# Runs.review, Runs.answer or Runs.budget: a person's decision on a run, taken from a JSON body.
Decision = Callable[[Runs, str, Any, Principal], Awaitable[ReviewOutcome]]


def decision(decide: Decision) -> Callable[[Request], Awaitable[Any]]:
    """The route for one kind of decision: the body read within the limit, sent as the caller."""
    async def route(request: Request) -> Any:
        shared = services(request)
        body = await read_json(request, shared.body_limit)
        return (await decide(shared.runs, request.path_params["run"], body, principal(request))).model_dump()
    return route


async def cancel(request: Request) -> Any:
    await services(request).runs.cancel(request.path_params["run"], principal(request))
    return {"cancelled": request.path_params["run"]}


ROUTES = [
    Route("/api/me", endpoint(me), methods=["GET"]),
    Route("/api/runs", endpoint(list_runs), methods=["GET"]),
    Route("/api/runs", endpoint(start_run), methods=["POST"]),
    Route("/api/runs/review-all", endpoint(review_all), methods=["POST"]),
    Route("/api/runs/cancel-all", endpoint(cancel_all), methods=["POST"]),
    Route("/api/runs/{run:str}", endpoint(show), methods=["GET"]),
    Route("/api/runs/{run:str}/events", endpoint(run_events), methods=["GET"]),
    Route("/api/runs/{run:str}/inspection", endpoint(inspection), methods=["GET"]),
    Route("/api/runs/{run:str}/review", endpoint(decision(Runs.review)), methods=["POST"]),
    Route("/api/runs/{run:str}/answer", endpoint(decision(Runs.answer)), methods=["POST"]),
    Route("/api/runs/{run:str}/budget", endpoint(decision(Runs.budget)), methods=["POST"]),
    Route("/api/runs/{run:str}/cancel", endpoint(cancel), methods=["POST"]),
    Route("/api/runs/{run:str}/fork", endpoint(fork_run), methods=["POST"]),
    Route("/api/runs/{run:str}/forks", endpoint(list_forks), methods=["GET"]),
]
