"""``starter.py history ID --as-test [NAME]``: a real run's history added to the replay corpus.

tests/test_replay.py replays every ``tests/histories/*.json`` (named by its file) with the plain
pydantic converter: no blob store, no keys. So the file written here has every payload resolved
and decrypted, and then the operator's secrets replaced in every string of every event (payload
bytes included, in their JSON-escaped form too) by the workers' own scrubber: a run that quoted a
key (a question, a page, a provider's error) must not put it into the repository. The file is then
replayed exactly as the corpus test will, and the command says whether it passes.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory

from activities.guards.secret_scrubber import SecretScrubber, secret_values
from config.settings import Settings
from runtime.front_door import CliError

CORPUS = Path("tests") / "histories"


def corpus_path(name: str) -> Path:
    """Where ``name`` goes in the corpus of the checkout the command runs in; refused if taken."""
    folder = Path.cwd() / CORPUS
    if not folder.is_dir():
        raise CliError(f"--as-test writes into {CORPUS}/ of the checkout it runs in: run it from the checkout's "
                       "top folder.")
    safe = "".join(char if char.isascii() and (char.isalnum() or char in "-_") else "_" for char in name)
    path = folder / f"{safe.strip('_') or 'run'}.json"
    if path.exists():
        raise CliError(f"{path} exists: give --as-test another name.")
    return path


def scrubber_of(settings: Settings) -> SecretScrubber:
    """The workers' scrubber, also for each secret as JSON writes it inside a string."""
    values = secret_values(settings, settings.variables())
    return SecretScrubber([*values, *(json.dumps(value)[1:-1] for value in values)])


def scrubbed(history: WorkflowHistory, scrubber: SecretScrubber) -> WorkflowHistory:
    """A copy of ``history`` with every string field and every UTF-8 payload scrubbed."""
    events = [type(event)() for event in history.events]
    for copy, event in zip(events, history.events, strict=True):
        copy.CopyFrom(event)
        _scrub(copy, scrubber)
    return WorkflowHistory(history.workflow_id, events)


def _scrub(message: Message, scrubber: SecretScrubber) -> None:
    if isinstance(message, Payload):
        with contextlib.suppress(UnicodeDecodeError):  # not text: no secret can be read from it as written
            message.data = scrubber.scrub(message.data.decode("utf-8")).encode("utf-8")
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            if field.is_repeated:
                value[:] = [scrubber.scrub(text) for text in value]
            else:
                setattr(message, field.name, scrubber.scrub(value))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:  # memo, headers, search attributes: payloads
                children = [child for child in value.values() if isinstance(child, Message)]
            else:
                children = list(value) if field.is_repeated else [value]
            for child in children:
                _scrub(child, scrubber)


async def replays_as_the_corpus_does(history: WorkflowHistory) -> str | None:
    """None if the file replays as tests/test_replay.py replays it, else why not."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer

    from runtime.replay import failure_text
    from runtime.workflow_runner import workflow_runner
    from workflows.catalog import WORKFLOWS

    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=pydantic_data_converter,
                        workflow_runner=workflow_runner())
    outcome = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    return None if outcome.replay_failure is None else failure_text(outcome.replay_failure)
