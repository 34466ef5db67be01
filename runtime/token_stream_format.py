"""Token previews on the wire: what the worker's publisher (activities/model/token_stream.py) and
the API server's sink (server/live.py) agree on.

Why it is its own module: the sink and the publisher run in different processes, often on different
machines, and the API server imports no worker code. The format is one pydantic model per piece
(``Delta``), the stream's id (the feed puts the same id on the final message), the sink's path and
the announcement file a local ``starter.py serve`` writes so that local workers find it.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from config.settings import Settings
from runtime.whole_file import replace_whole

ANNOUNCEMENT = "token-stream.json"
PATH = "/internal/token-stream"


class Sink(BaseModel):
    """Where previews go: an HTTP endpoint and the bearer token it expects."""

    url: str = Field(pattern=r"^https?://")
    token: str = Field(min_length=16)


class Delta(BaseModel):
    """One published piece of a reply: ``text`` starts at character ``offset`` of the stream."""

    workflow_id: str = Field(min_length=1, max_length=255)
    run_id: str = Field(min_length=1, max_length=64)
    activity_id: str = Field(min_length=1, max_length=64)
    attempt: int = Field(ge=1)
    agent: str = Field(max_length=64)
    offset: int = Field(ge=0)
    text: str

    @property
    def stream_id(self) -> str:
        return stream_id(self.workflow_id, self.run_id, self.activity_id, self.attempt)


def stream_id(workflow_id: str, run_id: str, activity_id: str, attempt: int) -> str:
    """The preview's message id; the feed puts the same id on the final message (``stream_id``)."""
    return f"{workflow_id}/live.{run_id}.{activity_id}.{attempt}"


def announce(home: Path, url: str, token: str) -> Path:
    """Tell local workers where this API server takes previews (owner-only file, atomic write)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / ANNOUNCEMENT
    replace_whole(path, json.dumps({"url": url, "token": token}))
    return path


def configured_sink(settings: Settings) -> Sink | None:
    """The operator's sink, else the one a local ``serve`` announced, else none."""
    if not settings.token_stream:
        return None
    if settings.token_stream_url:
        return Sink(url=settings.token_stream_url, token=settings.token_stream_token or "") \
            if settings.token_stream_token and len(settings.token_stream_token) >= 16 else None
    try:
        return Sink.model_validate_json((settings.home / ANNOUNCEMENT).read_bytes())
    except (OSError, ValueError):
        return None
