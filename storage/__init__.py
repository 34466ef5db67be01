"""Claim-check storage for large Temporal payloads.

Temporal keeps every activity input and result in workflow history, which is capped at 50 MB per
run and 2 MB per payload. The agent loop sends the whole conversation to the ``chat`` activity on
every turn and crawls bring back whole pages, so those payloads are written to a blob store here
and history keeps only a small reference (Temporal's external payload storage).

Every worker, client, and replayer must build its converter with :func:`data_converter` and share
the same blob store, or the references in history cannot be resolved.
"""

from storage.converter import data_converter, prepare_payload_store
from storage.filesystem import FileSystemStorageDriver, PayloadStoreError

__all__ = ["FileSystemStorageDriver", "PayloadStoreError", "data_converter", "prepare_payload_store"]
