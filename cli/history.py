"""``history`` and ``replay``: a run's event history exported as replayable JSON, and replayed
against this code (the operator's check before a deploy)."""

from __future__ import annotations

import argparse
import re
import sys

from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError
from temporalio.runtime import LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from cli.runs import _check_output, _describe, _write_file
from cli.terminal import printable
from config.settings import Settings
from runtime.converter import data_converter
from runtime.front_door import CliError, connect
from runtime.history_export import read_history_file, self_contained


async def history(args: argparse.Namespace, settings: Settings) -> int:
    _check_output(args.output)
    client = await connect(settings, ensure_worker=False)
    handle = client.get_workflow_handle(args.id)
    await _describe(handle)
    recorded = await handle.fetch_history()
    if not args.raw:
        recorded = await _resolved(recorded, client.data_converter, "or export with --raw")
    if args.output is None:
        print(recorded.to_json())
        return 0
    _write_file(args.output, recorded.to_json())
    print(f"History of {args.id} ({len(recorded.events)} events) written to {args.output}", file=sys.stderr)
    return 0


async def _resolved(recorded: WorkflowHistory, converter: DataConverter, otherwise: str) -> WorkflowHistory:
    """The history with its payload references resolved (runtime/history_export.py), or one clear
    error when a blob or a key is missing (a replay would otherwise misreport it as non-determinism)."""
    try:
        return await self_contained(recorded, converter)
    except (ApplicationError, RuntimeError) as error:
        raise CliError(f"Cannot read the payloads of {recorded.workflow_id} from the blob store: "
                       f"{str(error).rstrip('.')}. "
                       f"Use the worker's DEERFLOW_HOME or S3 settings (and encryption keys), {otherwise}.") from error


async def replay(args: argparse.Namespace, settings: Settings) -> int:
    if args.file:
        try:
            recorded = read_history_file(args.file, args.id)
        except (OSError, ValueError) as error:
            raise CliError(f"Cannot read history file {args.file}: {error}") from error
    elif args.id:
        client = await connect(settings, ensure_worker=False)
        handle = client.get_workflow_handle(args.id)
        await _describe(handle)
        recorded = await handle.fetch_history()
    else:
        raise CliError("replay needs a run ID or --file FILE.json")
    # The core would also log the failure as a coloured Rust warning; our one line says it already.
    quiet = Runtime(telemetry=TelemetryConfig(logging=LoggingConfig(filter=TelemetryFilter("ERROR", "ERROR"))))
    # Imported here: the workflow and the SDK's worker are heavy, and only replay needs them.
    from temporalio.worker import Replayer

    from runtime.message_payloads import worker_converter
    from runtime.workflow_runner import workflow_runner
    from workflows.catalog import WORKFLOWS

    converter = data_converter(settings)
    recorded = await _resolved(recorded, converter, "or replay a file written by `starter.py history` (self-contained)")
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=worker_converter(converter), runtime=quiet,
                        workflow_runner=workflow_runner())
    outcome = await replayer.replay_workflow(recorded, raise_on_replay_failure=False)
    if outcome.replay_failure is not None:
        print(printable(f"Replay FAILED for {recorded.workflow_id}: {_failure_text(outcome.replay_failure)}"))
        return 1
    print(f"Replay OK: {recorded.workflow_id} ({len(recorded.events)} events) is deterministic with this code.")
    return 0


def _failure_text(failure: BaseException) -> str:
    """The replayer's failure as a sentence: the core reports it as Rust debug text with colour codes."""
    text = " ".join(printable(str(failure)).split())
    message = re.search(r'message: "((?:[^"\\]|\\.)*)"', text)
    return message.group(1).replace('\\"', '"') if message else text
