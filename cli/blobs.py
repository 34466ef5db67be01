"""``starter.py blobs gc``: delete the blobs of runs the Temporal server no longer keeps (runtime/blob_gc.py)."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta

from temporalio.client import Client

from cli.terminal import printable
from config.settings import Settings
from runtime.blob_gc import BlobGcError, GcReport, collect_filesystem, collect_s3
from runtime.converter import storage_driver
from runtime.encryption import encryption_codec
from runtime.front_door import CliError, connect
from storage.filesystem import FileSystemStorageDriver

MAX_LISTED_UNREADABLE = 20


async def blobs_gc(args: argparse.Namespace, settings: Settings) -> int:
    if storage_driver(settings) is None:
        print("DEERFLOW_PAYLOAD_STORE=none: there is no blob store to clean.")
        return 0
    client = await connect(settings, ensure_worker=False)
    try:
        report = await collect(client, settings, min_age=args.older_than, dry_run=args.dry_run)
    except BlobGcError as error:
        raise CliError(str(error)) from error
    print(summary(report, dry_run=args.dry_run))
    return 0


async def collect(client: Client, settings: Settings, *, min_age: timedelta, dry_run: bool,
                  now: datetime | None = None) -> GcReport:
    """The collection for the store ``settings`` selects (not ``none``); ``now`` for tests."""
    driver = storage_driver(settings)
    decrypt = encryption_codec(settings)  # subtree references live inside (encrypted) payloads
    if isinstance(driver, FileSystemStorageDriver):
        return await collect_filesystem(client, driver, min_age=min_age, dry_run=dry_run, now=now, decrypt=decrypt)
    from storage.s3 import S3Client  # only deployments that use S3 import its client

    return await collect_s3(client, S3Client(settings), min_age=min_age, dry_run=dry_run, now=now, decrypt=decrypt)


def summary(report: GcReport, *, dry_run: bool) -> str:
    verb = "Would delete" if dry_run else "Deleted"
    lines = [f"  {name}" for name in report.deleted] if dry_run else []
    lines.append(f"{verb} {len(report.deleted)} blob(s); kept {report.kept_retained} of runs the server keeps, "
                 f"{report.kept_recent} younger than the margin, {report.kept_unknown} not tied to a run.")
    if report.unreadable:
        lines.append(f"Skipped {len(report.unreadable)} payload(s) it cannot read, in workflows that are not ours "
                     "or in what clients sent our runs (nothing of ours depends on them):")
        lines += [f"  {printable(line)}" for line in report.unreadable[:MAX_LISTED_UNREADABLE]]
        if len(report.unreadable) > MAX_LISTED_UNREADABLE:
            lines.append(f"  and {len(report.unreadable) - MAX_LISTED_UNREADABLE} more")
    return "\n".join(lines)
