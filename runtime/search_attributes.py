"""Registers the custom search attributes: those runs upsert (DeerFlowPhase, DeerFlowAwaiting, ...)
and those their starters set (DeerFlowStartedBy, DeerFlowQuestion).

Why here and not in the workflow: upserting an attribute the namespace does not know fails the
workflow task over and over, so the worker checks (and, where it may, registers) them once at
start-up and tells each run through ``RunConfig.search_attributes_enabled`` whether to upsert.
That depends on the upserted ones only: a namespace that has them but not the starters' (a
cluster registered before those existed, where the worker may not register) keeps its runs'
phases; starters then leave theirs out (runtime/research_client.py).
The keys themselves live in ``workflows.research.visibility`` so the workflow and this module share them.
"""

from __future__ import annotations

import contextlib
import logging

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

from workflows.research.visibility import ALL_KEYS, UPSERTED_KEYS

__all__ = ["ALL_KEYS", "dev_server_flags", "ensure_search_attributes", "missing_search_attributes"]

logger = logging.getLogger(__name__)

# The name `temporal server start-dev --search-attribute NAME=TYPE` and
# `temporal operator search-attribute create --type TYPE` use for each indexed type.
_CLI_TYPE_NAMES: dict[SearchAttributeIndexedValueType, str] = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


def _proto_type(key: SearchAttributeKey[str]) -> IndexedValueType.ValueType:
    # The SDK's enum mirrors the API's numbering, so the value converts one to one.
    return IndexedValueType.ValueType(int(key.indexed_value_type))


def cli_type_name(key: SearchAttributeKey[str]) -> str:
    """``Keyword`` etc., as the temporal CLI spells the type (used by compose and the dev server)."""
    return _CLI_TYPE_NAMES[key.indexed_value_type]


def dev_server_flags() -> list[str]:
    """``--search-attribute NAME=Keyword`` flags, so ``temporal server start-dev`` registers ours at start."""
    flags: list[str] = []
    for key in ALL_KEYS:
        flags += ["--search-attribute", f"{key.name}={cli_type_name(key)}"]
    return flags


async def missing_search_attributes(client: Client) -> list[SearchAttributeKey[str]]:
    """Our keys the namespace lacks. Raises if one exists with another type: that cannot be fixed here."""
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    missing: list[SearchAttributeKey[str]] = []
    for key in ALL_KEYS:
        registered = response.custom_attributes.get(key.name)
        if registered is None:
            missing.append(key)
        elif registered != _proto_type(key):
            raise ValueError(f"search attribute {key.name} is registered as "
                             f"{IndexedValueType.Name(registered)}, not {cli_type_name(key)}")
    return missing


async def ensure_search_attributes(client: Client) -> bool:
    """True when the search attributes runs upsert are usable on the client's namespace.

    Registers missing ones (the starters' too) through the operator service (dev server,
    self-hosted). Where that is not allowed (Temporal Cloud, no permission) it logs a warning and
    returns whether the upserted ones exist: without them runs work without them instead of
    failing, and the worker keeps starting.
    """
    missing = list(ALL_KEYS)  # until the namespace says otherwise
    try:
        missing = await missing_search_attributes(client)
        if not missing:
            return True
        await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
            namespace=client.namespace,
            search_attributes={key.name: _proto_type(key) for key in missing},
        ))
        logger.info("Registered search attributes %s on namespace %s",
                    ", ".join(key.name for key in missing), client.namespace)
        return True
    except Exception as error:  # any failure means "run without them", never "do not start"
        # Another worker may have registered them at the same moment: look once more.
        with contextlib.suppress(Exception):  # the first error is the one worth reporting
            missing = await missing_search_attributes(client)
            if not missing:
                return True
        logger.warning("Custom search attributes (%s) are not available on namespace %s: %s. Register them with "
                       "`temporal operator search-attribute create` (README: Search attributes).",
                       ", ".join(key.name for key in missing), client.namespace, error)
        return not set(UPSERTED_KEYS) & set(missing)
