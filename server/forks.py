"""Our page's API over forks (runtime/forks.py does the work): fork a run, and list a run's forks.

A fork is a run like any other: only a holder who may see the source may fork it, and only one who
may start runs (a viewer may not); the fork is the caller's (its memo names them, and their role
decides who else sees it), and a source that names another token's uploads is refused as a run
naming them would be. A run's forks are listed as far as the caller may see them: the forks
another holder started out of the caller's sight are left out, not counted.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime import research_client
from runtime.forks import ForkError, ForkListed, fork_id, fork_request, forks_of
from server.access import Act, Principal
from server.runs import Runs
from server.security import RequestError
from workflows.contracts.fork_point import MAX_EDIT_CHARS, ForkPoint, ForkStage
from workflows.contracts.report_style import ReportStyle


class ForkBody(BaseModel):
    """``{"from": "step", "step": 2, "report_style": "news", "locale": "zh-CN", "edit": "…"}``."""

    model_config = ConfigDict(extra="forbid")

    stage: ForkStage = Field(alias="from")
    step: int | None = None
    edit: str | None = Field(default=None, max_length=MAX_EDIT_CHARS)
    report_style: ReportStyle | None = None
    locale: str | None = Field(default=None, min_length=2, max_length=35)


async def fork(runs: Runs, run: str, body: Any, who: Principal) -> str:
    """Start a fork of ``run`` as ``who``; its workflow id. Every refusal comes before the start: the
    caller's role, the source's visibility, the body, the point (the source's state must reach it),
    and the source's uploads."""
    who.check_start()
    source = await runs.handle(run, who, Act.SEE)  # a run the caller may not see is "not found"
    asked = ForkBody.model_validate(body)
    point = ForkPoint(workflow_id=run, stage=asked.stage, step=asked.step, edit=asked.edit)
    try:
        request = await fork_request(runs.client, source, point, report_style=asked.report_style, locale=asked.locale)
    except ForkError as refused:
        raise RequestError(str(refused), 409) from None
    runs.uploads.check_resources(request.resources, who)
    forked = fork_id(run, uuid.uuid4().hex[:12])
    await research_client.start(runs.client, request, run_id=forked, started_by=who.actor,
                                summary=f"Fork (web) of {run} at {point.at}: {request.question[:150]}")
    return forked


async def visible_forks(runs: Runs, run: str, who: Principal) -> list[ForkListed]:
    """The forks of ``run`` that ``who`` may see (``run`` itself checked first)."""
    await runs.handle(run, who, Act.SEE)
    return await forks_seen_by(runs, run, who)


async def forks_seen_by(runs: Runs, run: str, who: Principal) -> list[ForkListed]:
    """The forks of ``run`` that ``who`` may see, for a caller that has just checked that ``who`` may
    see ``run`` (the inspection: its check described the run, and another would describe it again)."""
    return [found for found in await forks_of(runs.client, run) if who.may(Act.SEE, found.started_by)]


def listed(found: ForkListed) -> dict[str, Any]:
    return {"id": found.workflow_id, "at": found.at, "status": found.status,
            "started_by": str(found.started_by) if found.started_by else None}
