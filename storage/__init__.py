"""Claim-check storage for large Temporal payloads.

Temporal keeps every activity input and result in workflow history, which is capped at 50 MB per
run and 2 MB per payload. The agent loop sends the whole conversation to the ``chat`` activity on
every turn and crawls bring back whole pages, so those payloads are written to a blob store here
and history keeps only a small reference (Temporal's external payload storage).

This package holds the stores (drivers) only. The data converter that wires them in, which every
worker, client and replayer must share, is ``runtime.converter.data_converter``.
"""

from storage.filesystem import FileSystemStorageDriver, PayloadStoreError

__all__ = ["FileSystemStorageDriver", "PayloadStoreError"]
