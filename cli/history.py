"""``history`` and ``replay``: a run's event history exported as replayable JSON (or into the replay
corpus, ``--as-test``), and replayed against this code (the operator's check before a deploy)."""

from __future__ import annotations

import argparse
import sys

from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from cli.runs import _check_output, _describe, _write_file
from cli.terminal import printable
from config.settings import Settings
from runtime.converter import data_converter
from runtime.front_door import CliError, connect
from runtime.history_export import read_history_file, self_contained
from runtime.replay import diverged, replayer


async def history(args: argparse.Namespace, settings: Settings) -> int:
    if args.as_test is not None and (args.output or args.raw):
        raise CliError("--as-test writes into tests/histories/, plain: without -o or --raw")
    _check_output(args.output)
    client = await connect(settings, ensure_worker=False)
    handle = client.get_workflow_handle(args.id)
    await _describe(handle)
    recorded = await handle.fetch_history()
    if args.as_test is not None:
        return await _as_test(recorded, client.data_converter, args.as_test or args.id, settings)
    if not args.raw:
        recorded = await _resolved(recorded, client.data_converter, "or export with --raw")
    if args.output is None:
        print(recorded.to_json())
        return 0
    _write_file(args.output, recorded.to_json())
    print(f"History of {args.id} ({len(recorded.events)} events) written to {args.output}", file=sys.stderr)
    return 0


async def _as_test(recorded: WorkflowHistory, converter: DataConverter, name: str, settings: Settings) -> int:
    """The run's history, plain and scrubbed, into the replay corpus (cli/replay_corpus.py)."""
    from cli.replay_corpus import corpus_path, replays_as_the_corpus_does, scrubbed, scrubber_of

    path = corpus_path(name)
    plain = await _resolved(recorded, converter, "and keys, to write it for the corpus", encrypted=False)
    written = scrubbed(WorkflowHistory(path.stem, plain.events), scrubber_of(settings))
    _write_file(str(path), written.to_json())
    print(f"History of {recorded.workflow_id} ({len(written.events)} events, secrets scrubbed) written to {path}",
          file=sys.stderr)
    problem = await replays_as_the_corpus_does(written)
    if problem is not None:
        print(printable(f"It does not replay with this code, as tests/test_replay.py will: {problem}"))
        return 1
    print(f"It replays with this code; tests/test_replay.py replays it from now on as {path.stem}.")
    return 0


def history_file(path: str, workflow_id: str | None) -> WorkflowHistory:
    """The history file at ``path`` (runtime/history_export.py ``read_history_file``), or the one line
    saying why not: ``replay --file`` and ``inspect --file`` read one alike."""
    try:
        return read_history_file(path, workflow_id)
    except (OSError, ValueError) as error:
        raise CliError(f"Cannot read history file {path}: {error}") from error


async def _resolved(recorded: WorkflowHistory, converter: DataConverter, otherwise: str, *,
                    encrypted: bool = True) -> WorkflowHistory:
    """The history with its payload references resolved (runtime/history_export.py), or one clear
    error when a blob or a key is missing (a replay would otherwise misreport it as non-determinism)."""
    try:
        return await self_contained(recorded, converter, encrypted=encrypted)
    except (ApplicationError, RuntimeError) as error:
        raise CliError(f"Cannot read the payloads of {recorded.workflow_id} from the blob store: "
                       f"{str(error).rstrip('.')}. "
                       f"Use the worker's DEERFLOW_HOME or S3 settings (and encryption keys), {otherwise}.") from error


async def replay(args: argparse.Namespace, settings: Settings) -> int:
    """One run's history (by ID or from a file), or with ``--since``/``--query`` every closed run
    the server keeps (cli/fleet_replay.py), replayed against this code."""
    if args.since is not None or args.query is not None:
        if args.id or args.file:
            raise CliError("replay takes a run ID, --file FILE, or --since/--query for every closed run, not both")
        from cli.fleet_replay import replay_fleet

        return await replay_fleet(args, settings)
    if args.file:
        recorded = history_file(args.file, args.id)
    elif args.id:
        client = await connect(settings, ensure_worker=False)
        handle = client.get_workflow_handle(args.id)
        await _describe(handle)
        recorded = await handle.fetch_history()
    else:
        raise CliError("replay needs a run ID, --file FILE.json, or --since 7d for every closed run")
    converter = data_converter(settings)
    recorded = await _resolved(recorded, converter, "or replay a file written by `starter.py history` (self-contained)")
    replaying = replayer(converter)
    outcome = await replaying.replay_workflow(recorded, raise_on_replay_failure=False)
    if outcome.replay_failure is not None:
        where = await diverged(replaying, recorded, outcome.replay_failure)
        print(printable(f"Replay FAILED for {recorded.workflow_id}: it diverges at {where.event}: {where.message}"))
        return 1
    print(f"Replay OK: {recorded.workflow_id} ({len(recorded.events)} events) is deterministic with this code.")
    return 0
