"""The filters of research runs as the commands take them (``list``, ``costs``, ``review --all-awaiting``,
``cancel`` without an ID): flags into a ``RunFilter`` (runtime/run_listing.py), refused by flag name."""

from __future__ import annotations

import argparse

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from runtime.front_door import CliError
from runtime.run_listing import RunFilter
from runtime.run_memo import indexes_questions
from runtime.search_attributes import missing_search_attributes
from workflows.contracts.status import Awaiting
from workflows.research.visibility import ALL_KEYS, AWAITING, PHASE, QUESTION, STARTED_BY

FLAGS = {"phase": "--phase", "awaiting": "--awaiting", "started_by": "--started-by", "question": "--question",
         "since": "--since", "older_than": "--older-than", "query": "--query"}


def run_filter(args: argparse.Namespace) -> RunFilter:
    """The filter the command's flags describe (``list``, ``review --all-awaiting``, ``cancel --query``)."""
    awaiting = Awaiting.PLAN_FEEDBACK if getattr(args, "awaiting_review", False) else getattr(args, "awaiting", None)
    fields = {"phase": getattr(args, "phase", None), "awaiting": awaiting,
              "started_by": getattr(args, "started_by", None), "question": getattr(args, "question", None),
              "since": getattr(args, "since", None), "older_than": getattr(args, "older_than", None),
              "running": getattr(args, "running", False), "query": getattr(args, "query", None)}
    try:
        return RunFilter(**fields)
    except ValidationError as error:
        problem = error.errors()[0]
        flag = FLAGS.get(str(problem["loc"][0]) if problem["loc"] else "", "a filter")
        raise CliError(f"{flag}: {problem['msg'].removeprefix('Value error, ')}") from None


async def missing_for(client: Client, wanted: RunFilter) -> list[SearchAttributeKey[str]]:
    """The search attributes the namespace lacks (all of ours when it cannot say); refuses a filter
    that needs one of them, naming it."""
    try:
        missing = await missing_search_attributes(client)
    except (RPCError, ValueError):
        missing = list(ALL_KEYS)
    needed = {PHASE: wanted.phase, AWAITING: wanted.awaiting, STARTED_BY: wanted.started_by,
              QUESTION: wanted.question and indexes_questions(client)}
    lacking = [key.name for key in missing if needed.get(key)]
    if lacking:
        raise CliError(f"This namespace lacks the search attribute(s) {', '.join(lacking)} the filter needs: a "
                       "worker registers them at its start where it may; else `temporal operator search-attribute "
                       "create` (README: Search attributes).")
    return missing
