"""The front doors' servers: the embedded dev server, the codec server, the API server
(``starter.py serve``) and the token previews it relays."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from config.groups.base import SettingsGroup, comma_separated


class Role(StrEnum):
    """What a named API token may do beyond the runs it started (server/access.py)."""

    REVIEWER = "reviewer"  # sees every run, and may review, answer and decide on any
    VIEWER = "viewer"  # sees every run, changes nothing (starts no run either)
    ADMIN = "admin"  # everything, on every run


# The name DEERFLOW_WEB_TOKEN's holder (an admin) is known and recorded by (server/access.py).
SINGLE_TOKEN_NAME = "operator"


class NamedToken(BaseModel):
    """One holder of the API: its name is what runs record as who started them and who decided."""

    model_config = ConfigDict(extra="forbid")

    # Also the name of its upload folder (server/uploads.py): never hidden, never "." or "..".
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
    token: str = Field(min_length=16)
    role: Role | None = None  # None: only the runs this token started


class WebSettings(SettingsGroup):
    """What cli/, server/ and runtime/embedded.py bind, accept and allow."""

    # The front door (cli/, runtime/embedded.py). The embedded dev server's Web UI port; tests and a
    # second checkout choose another so that two embedded servers can run side by side.
    ui_port: int = Field(default=8233, ge=1, le=65535, alias="DEERFLOW_UI_PORT")
    """Web UI port of the embedded dev server (another one runs two checkouts side by side)."""
    # Where the front door runs the embedded dev server when no Temporal address is configured
    # (TEMPORAL_ADDRESS or a profile's address, which are only ever connected to). Loopback only.
    embedded_address: str = Field(default="127.0.0.1:7233", alias="DEERFLOW_EMBEDDED_ADDRESS",
                                  pattern=r"^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|\[::1\]):\d{1,5}$")
    """Loopback address of the embedded dev server, used when no Temporal address is configured."""

    # The codec server (server/codec.py) serves the Web UI and the `temporal` CLI: beyond loopback it
    # needs the token; browsers need their origin listed (unset: the embedded Web UI's,
    # http://127.0.0.1:<DEERFLOW_UI_PORT> and localhost). The embedded default starts it on
    # DEERFLOW_CODEC_PORT (unset: a free port).
    codec_token: str | None = Field(default=None, alias="DEERFLOW_CODEC_TOKEN")
    """Bearer token of the codec server; required beyond loopback."""
    codec_allowed_origins: list[str] | None = Field(default=None, alias="DEERFLOW_CODEC_ALLOWED_ORIGINS")
    """Browser origins the codec server answers. Unset: the embedded Web UI's."""
    codec_max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024,
                                      alias="DEERFLOW_CODEC_MAX_BODY_BYTES")
    """Request body cap of the codec server."""
    codec_port: int | None = Field(default=None, ge=1, le=65535, alias="DEERFLOW_CODEC_PORT")
    """Port of the embedded default's codec server. Unset: a free port."""

    def codec_origins(self) -> list[str]:
        """The browser origins the codec server answers: the operator's, else the embedded Web UI's."""
        if self.codec_allowed_origins is not None:
            return self.codec_allowed_origins
        return [f"http://127.0.0.1:{self.ui_port}", f"http://localhost:{self.ui_port}"]

    # The web front end (server/): `starter.py serve`. A bind beyond loopback needs the token
    # (sent as `Authorization: Bearer ...`); browsers on other origins (DeerFlow's UI) need their
    # origin listed. Runs it starts for DeerFlow threads get workflow ids under the prefix, so a
    # thread id can only ever address runs the server itself started for that thread.
    web_token: str | None = Field(default=None, alias="DEERFLOW_WEB_TOKEN")
    """Bearer token for `starter.py serve`; required for any non-loopback bind (an admin named "operator")."""
    # Named tokens with roles (JSON list in the env, a table in conf.yaml): [{"name": "alice",
    # "token": "…", "role": "reviewer"}]. DEERFLOW_WEB_TOKEN, if set too, is one more: an admin
    # named "operator". Either one makes every API call need a token.
    web_tokens: list[NamedToken] = Field(default_factory=list, alias="DEERFLOW_WEB_TOKENS")
    """Named API tokens, JSON (or a list in conf.yaml, where `token: $VAR` reads the token from the environment):
    `[{"name": "alice", "token": "…", "role": "reviewer"}]`; `role` is `reviewer`, `viewer`, `admin` or absent (own
    runs only); names and tokens distinct, `DEERFLOW_WEB_TOKEN` (named `operator`) counted in (a clash stops every
    entry point, exit 2), tokens 16+ characters. See Security.
    """
    web_allowed_origins: list[str] = Field(default_factory=lambda: ["http://localhost:3000"],
                                           alias="DEERFLOW_WEB_ALLOWED_ORIGINS")
    """Comma-separated browser origins allowed by the API server's CORS (DeerFlow's `ALLOWED_ORIGINS`)."""
    web_max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024,
                                    alias="DEERFLOW_WEB_MAX_BODY_BYTES")
    """Request body cap of the API server."""
    web_thread_prefix: str = Field(default="deerflow-web-", pattern=r"^[A-Za-z0-9_.-]{1,40}$",
                                   alias="DEERFLOW_WEB_THREAD_PREFIX")
    """Workflow-id prefix of runs started for DeerFlow threads."""
    # Event streams open at once; each holds a long poll on Temporal while its page is open.
    web_max_streams: int = Field(default=64, ge=1, le=10_000, alias="DEERFLOW_WEB_MAX_STREAMS")
    """Event streams the API server keeps open at once."""
    # DeerFlow's Stop: its UI aborts its /api/chat/stream, and a run whose client goes away while it
    # works is cancelled, as DeerFlow stops its graph (not once the turn delivered a plan for review,
    # a question or the report). Off: runs outlive the tab, and only /api/chat/cancel stops them.
    web_cancel_on_disconnect: bool = Field(default=True, alias="DEERFLOW_WEB_CANCEL_ON_DISCONNECT")
    """A run whose `/api/chat/stream` client goes away mid-turn (DeerFlow's Stop, a closed tab) is cancelled; `false`:
    it goes on.
    """
    # The content flows' request bodies (a whole report: evaluation, slides, podcast, prose edits).
    web_max_content_bytes: int = Field(default=1024 * 1024, ge=64 * 1024, le=16 * 1024 * 1024,
                                       alias="DEERFLOW_WEB_MAX_CONTENT_BYTES")
    """Body cap of the content flows (evaluation, slides, podcast, prose)."""
    # Seconds a content flow's request waits for its answer, which is also how long the flow's run may
    # take at all: a worker that comes back within it (a crash's replacement, a deploy) finishes the
    # flow and the request answers; past it, the request is a 504 and the run ends on its own.
    web_content_wait: float = Field(default=300.0, ge=1, le=3600, alias="DEERFLOW_WEB_CONTENT_WAIT")
    """Seconds a content flow's request waits for its answer (and its run may take): a worker back within it finishes
    the flow; past it, a 504.
    """
    # DeerFlow's RAG upload (server/uploads.py): where uploaded .md/.txt files go (inside a
    # resource root; unset: uploads/ in the first root), and the caps per file and for the folder.
    # Each token's uploads go to <folder>/<token name>/, seen by it and by admins only; the team
    # folder, if the operator sets one (inside a resource root), takes every upload instead, seen by all.
    web_upload_dir: Path | None = Field(default=None, alias="DEERFLOW_WEB_UPLOAD_DIR")
    """Where DeerFlow's RAG upload stores files (inside a resource root): each token's in `<folder>/<token name>/`
    (`local` without tokens), seen and usable by that token and admins only. See Security. Unset: `uploads/` in the
    first resource root.
    """
    web_team_upload_dir: Path | None = Field(default=None, alias="DEERFLOW_WEB_TEAM_UPLOAD_DIR")
    """A shared team folder (inside a resource root): every upload goes there, and every token sees and may use what it
    holds. Unset: unset (no shared folder).
    """
    web_upload_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
                                      alias="DEERFLOW_WEB_UPLOAD_MAX_BYTES")
    """Cap per uploaded file."""
    web_upload_max_total_bytes: int = Field(default=512 * 1024 * 1024, ge=1024,
                                            alias="DEERFLOW_WEB_UPLOAD_MAX_TOTAL_BYTES")
    """Cap of each token's upload folder (and of the team folder)."""

    # Token previews (issue #14; activities/model/token_stream.py, server/live.py): the chat activity
    # publishes its reply as it is generated to the API server's /internal/token-stream, best
    # effort and never durable. Unset URL: the sink the local `serve` announces under <home>
    # (the embedded default). The token is the shared secret between workers and API servers; a
    # server with none makes a new one at each start and announces it. Off: no streaming at all.
    token_stream: bool = Field(default=True, alias="DEERFLOW_TOKEN_STREAM")
    """Token previews of the model's reply as it is generated; `false`: none."""
    token_stream_url: str | None = Field(default=None, pattern=r"^https?://", alias="DEERFLOW_TOKEN_STREAM_URL")
    """Where workers publish previews (an API server's `/internal/token-stream`). Unset: the local `serve`'s."""
    token_stream_token: str | None = Field(default=None, alias="DEERFLOW_TOKEN_STREAM_TOKEN")
    """The secret workers and API servers share for previews. Unset: a new one per `serve`."""
    # Seconds one publish may take before the rest of that reply goes unpublished.
    token_stream_timeout: float = Field(default=0.5, gt=0, le=10, alias="DEERFLOW_TOKEN_STREAM_TIMEOUT")
    """Seconds one publish may take before the rest of that reply goes unpublished."""
    # Characters waiting for a slow sink before the rest of that reply goes unpublished.
    token_stream_max_pending: int = Field(default=65_536, ge=1024, le=4 * 1024 * 1024,
                                          alias="DEERFLOW_TOKEN_STREAM_MAX_PENDING")
    """Characters waiting for a slow sink before the rest goes unpublished."""

    @field_validator("web_tokens", mode="before")
    @classmethod
    def _parse_tokens(cls, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    @field_validator("web_tokens")
    @classmethod
    def _distinct_tokens(cls, value: list[NamedToken], info: ValidationInfo) -> list[NamedToken]:
        """Two holders with one name could not be told apart in the record (a role-less ``operator``
        would act on every run the admin ``DEERFLOW_WEB_TOKEN`` started); one token with two names
        would make the record say whichever came first and give it whichever role. So every name
        and every token is one holder's, ``DEERFLOW_WEB_TOKEN`` (named ``operator``) counted in;
        ``web_token`` is declared first, so it is validated by now."""
        single = info.data.get("web_token")
        names = [t.name for t in value] + ([SINGLE_TOKEN_NAME] if single else [])
        tokens = [t.token for t in value] + ([single] if single else [])
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice is not None:
            also = " and DEERFLOW_WEB_TOKEN, whose holder is named operator" if twice == SINGLE_TOKEN_NAME else ""
            raise ValueError(f"the name {twice!r} is given to two tokens (DEERFLOW_WEB_TOKENS{also}); "
                             "each holder needs its own name")
        if len(set(tokens)) != len(tokens):
            also = " or DEERFLOW_WEB_TOKEN" if single and tokens.count(single) > 1 else ""
            raise ValueError(f"two holders have the same token (DEERFLOW_WEB_TOKENS{also}); "
                             "each holder needs its own token")
        return value

    @field_validator("web_allowed_origins", "codec_allowed_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: Any) -> Any:
        return comma_separated(value, lambda origin: origin.rstrip("/"))

    @field_validator("web_allowed_origins")
    @classmethod
    def _origins_are_origins(cls, value: list[str]) -> list[str]:
        """A browser sends ``scheme://host[:port]`` and CORS compares it exactly, so anything else
        (a JSON list, a path) would allow nothing while looking configured: refuse it by name."""
        for origin in value:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query \
                    or parts.fragment or any(c in parts.netloc for c in "\"' ,"):
                raise ValueError(f"{origin!r} is not an origin like http://localhost:3000 "
                                 "(DEERFLOW_WEB_ALLOWED_ORIGINS is a comma-separated list)")
        return value
