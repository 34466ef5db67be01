"""The JSON object in a model's reply: inside a fenced block if there is one, else between the
first "{" and the last "}". Pure, so workflow code parses replies itself (the judge, the slide
composer, the podcast script writer all answer with one JSON object)."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def reply_json(reply: str) -> Any:
    """The decoded JSON; ``ValueError`` when the reply holds none."""
    fenced = _FENCED.search(reply)
    return json.loads(fenced.group(1) if fenced else reply[reply.find("{"):reply.rfind("}") + 1])
