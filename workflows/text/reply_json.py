"""The JSON object in a model's reply: inside a fenced block if there is one, else between the
first "{" and the last "}". Pure, and linear in the reply's length, so workflow code parses replies
itself (the judge, the slide composer, the podcast script writer all answer with one JSON object).

A reply is model output, so whatever it holds, parsing it raises ``ReplyNotJson`` (a ValueError)
and nothing else: ``json.loads`` recurses once per level (a reply 3,000 arrays deep is a
RecursionError), a value deeper than ``MAX_REPLY_DEPTH`` is refused before anything walks it, and
a ``"\\ud800"`` escape, which no payload could carry, is read as U+FFFD (workflows/text/untrusted_text.py).

The fence is found by scanning, not by the pattern ``` ```(?:json)?\\s*(.*?)``` ``` it replaces, which
gives the same block but backtracks: 60,000 spaces after a lone fence took it minutes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from workflows.text.untrusted_text import nested_deeper, scrubbed

FENCE = "```"
# Far beyond any reply a content flow's output cap lets through; a longer one is no usable answer.
MAX_REPLY_CHARS = 1_000_000
# Deeper than any of the flows' shapes (a deck's table rows are 4 levels down).
MAX_REPLY_DEPTH = 32
_SPACES = re.compile(r"\s*")  # anchored at one position (match): one linear run


class ReplyNotJson(ValueError):
    """The reply holds no JSON value a flow can read; the message says why."""


def fenced(reply: str) -> str | None:
    """The text of the reply's first fenced block (after an optional ``json`` tag and blank space),
    or None when no fence is closed: what ``re.search(r"```(?:json)?\\s*(.*?)```", reply, re.DOTALL)``
    finds as its group, in one pass."""
    opening = reply.find(FENCE)
    if opening < 0:
        return None
    start = opening + len(FENCE)
    if reply.startswith("json", start) and reply.find(FENCE, start + 4) >= 0:
        start += 4
    spaces = _SPACES.match(reply, start)
    start = spaces.end() if spaces else start
    end = reply.find(FENCE, start)
    return reply[start:end] if end >= 0 else None


def reply_json(reply: str) -> Any:
    """The decoded JSON; ``ReplyNotJson`` when the reply holds none a flow can read."""
    if len(reply) > MAX_REPLY_CHARS:
        raise ReplyNotJson(f"the reply is longer than {MAX_REPLY_CHARS:,} characters")
    block = fenced(reply)
    text = block if block is not None else reply[reply.find("{"):reply.rfind("}") + 1]
    try:
        value = json.loads(text)
    except RecursionError:
        raise ReplyNotJson(f"the reply's JSON is nested deeper than {MAX_REPLY_DEPTH} levels") from None
    except ValueError as error:  # JSONDecodeError; a number over int's digit limit
        raise ReplyNotJson(str(error)) from None
    if nested_deeper(value, MAX_REPLY_DEPTH):
        raise ReplyNotJson(f"the reply's JSON is nested deeper than {MAX_REPLY_DEPTH} levels")
    return scrubbed(value)
