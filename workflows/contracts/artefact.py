"""A content flow's file (a slide deck, a podcast) by reference: where the blob store keeps it.

Files are written to the blob store by the activity that makes them (runtime/artefacts.py), so
history holds this small reference, never the bytes. With ``DEERFLOW_PAYLOAD_STORE=none`` there
is no store, and the bytes travel inline, as every other payload then does.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from workflows.contracts.base import Contract


class ArtefactRef(Contract):
    # Audio and decks are binary: JSON carries them as base64 (pydantic's default, UTF-8, fails on them).
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    claim: dict[str, str] = Field(default_factory=dict)  # the store's claim (empty: inline)
    size: int = Field(ge=0)
    inline: bytes | None = None
