"""Who is calling the API server and what they may do with which run.

The operator names the API's holders (``DEERFLOW_WEB_TOKENS``: name, token, optional role); the
guard (server/security.py) finds the holder of each request's token and hands it to the handlers
as a ``Principal``. A run remembers who started it (its memo, runtime/run_memo.py), and:

* a token with no role sees and acts on the runs it started, and on no other;
* ``reviewer`` also sees every run and may review, answer and decide on any (not cancel others');
* ``viewer`` sees every run and changes nothing: the guard refuses its every non-GET request;
* ``admin`` may do everything. ``DEERFLOW_WEB_TOKEN`` (the single token of earlier versions) is an
  admin named "operator", and a server with no token at all (loopback only) treats its callers
  as the local admin, as before.

Whatever a holder does is recorded under its name (workflows/contracts/decisions.py), so the name, not the
token, is what the record shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from starlette.requests import Request

from config.groups.web import SINGLE_TOKEN_NAME, Role
from config.settings import Settings
from server.security import RequestError
from workflows.contracts.decisions import Actor, Via


class Act(StrEnum):
    """What a request does to a run."""

    SEE = "see"
    DECIDE = "decide"  # review the plan, answer a question
    CANCEL = "cancel"


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role | None

    @property
    def actor(self) -> Actor:
        return Actor(name=self.name, via=Via.API)

    def may(self, act: Act, started_by: Actor | None) -> bool:
        """Whether this holder may ``act`` on a run started by ``started_by`` (None: unknown)."""
        own = started_by == self.actor
        match self.role:
            case Role.ADMIN:
                return True
            case Role.REVIEWER:
                return act is not Act.CANCEL or own
            case Role.VIEWER:
                return act is Act.SEE
            case None:
                return own

    def check(self, act: Act, started_by: Actor | None) -> None:
        """Refuse as "not found" what this holder may not see, and with 403 what it may see but not do."""
        if not self.may(Act.SEE, started_by):
            raise RequestError("no such research run", 404)
        if not self.may(act, started_by):
            raise RequestError(f"the token {self.name!r} ({self.role_label}) may not {act.value} this run", 403)

    def check_start(self) -> None:
        if self.role is Role.VIEWER:
            raise RequestError(f"the token {self.name!r} (viewer) may only read", 403)

    @property
    def read_only(self) -> bool:
        return self.role is Role.VIEWER

    @property
    def role_label(self) -> str:
        return self.role.value if self.role else "its own runs only"


LOCAL = Principal(name="local", role=Role.ADMIN)  # no token configured: loopback callers, as before


def token_table(settings: Settings) -> dict[str, Principal]:
    """Each token's holder; empty when the server needs no token."""
    table = {entry.token: Principal(entry.name, entry.role) for entry in settings.web_tokens}
    if settings.web_token:  # its name and token are no named token's (config/groups/web.py)
        table[settings.web_token] = Principal(SINGLE_TOKEN_NAME, Role.ADMIN)
    return table


def token_setting(settings: Settings) -> str:
    """What a refused caller is told to send, naming only the settings the operator used."""
    named = "a token of DEERFLOW_WEB_TOKENS"
    if settings.web_tokens and settings.web_token:
        return f"DEERFLOW_WEB_TOKEN or {named}"
    return named if settings.web_tokens else "DEERFLOW_WEB_TOKEN"


def holders_said(settings: Settings) -> str:
    """Who may call the API, as the server says at start: names and roles, never a token."""
    table = token_table(settings)
    if not table:
        return "no token: callers on loopback only, each as the local admin"
    holders = sorted({(holder.name, holder.role_label) for holder in table.values()})
    return f"{len(holders)} token(s): " + ", ".join(f"{name} ({role})" for name, role in holders)


def principal(request: Request) -> Principal:
    """The holder the guard found for this request."""
    found = request.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else LOCAL
