"""The base of the workflows' data contracts: each builds its validator when first used (issue #45).

A process uses a few of them: a command reading a run's status validates one answer, an activity
its request and result, and the workflow's sandbox, which imports these modules afresh for each run,
those of its messages. Built at import (pydantic's default), the contracts' validators were 0.02-0.03 s
of every command's CPU, most of them never used by it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Contract(BaseModel):
    """A pydantic model whose validator and serializer are built on first use (``defer_build``)."""

    model_config = ConfigDict(defer_build=True)
