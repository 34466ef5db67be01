"""What the command line imports before it answers (issue #45): ``--version`` and ``--help`` answer
from the parser alone, and each command imports its own module only.

Imports are most of a command's time (a command's own work is a round trip or two to the server):
Temporal's SDK alone is about a third of a second of CPU, pydantic and the settings as much again.
``bench/cli_latency.py`` times the commands; these pin down what must not be imported at all.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import subprocess
import sys

import pytest

import starter
from cli.parser import Command
from tests.support.processes import REPO_DIR

# Temporal's SDK, pydantic, the model libraries, the web stacks (client and server side) and PyYAML.
HEAVY = ("temporalio", "grpc", "google.protobuf", "pydantic", "openai", "langchain_core", "langchain_openai",
         "langsmith", "httpx", "httpx2", "aiohttp", "requests", "starlette", "uvicorn", "rich", "config.settings",
         "yaml")
# Each command line given (as JSON) runs in turn in one process, as ``python starter.py ARGS`` would; after
# each, the heavy modules loaded so far are printed on a line of their own, after "loaded:".
LOADED_BY_ARGV = f"""
import json, sys
import pytest

import starter
for argv in json.loads(sys.argv[1]):
    sys.argv = ["starter.py", *argv]
    try:
        starter.main(argv)
    except SystemExit:
        pass
    print("loaded:", *(name for name in sys.modules if name.startswith({HEAVY!r})), file=sys.stderr)
"""


def heavy_modules_loaded_by(*argvs: list[str]) -> list[list[str]]:
    """The heavy modules loaded after each command line of ``argvs``, run one after another in one process."""
    done = subprocess.run([sys.executable, "-c", LOADED_BY_ARGV, json.dumps(argvs)], cwd=REPO_DIR,
                          capture_output=True, text=True, timeout=120, check=True)
    return [line.split()[1:] for line in done.stderr.splitlines() if line.startswith("loaded:")]


def test_the_parser_answers_without_temporal_pydantic_model_or_web_libraries() -> None:
    parsed_only = [["--version"], ["--help"], ["status", "--help"], ["run", "--max-steps", "zero"]]
    assert heavy_modules_loaded_by(*parsed_only) == [[]] * len(parsed_only)


def test_a_command_imports_what_it_needs() -> None:
    """The lazy handler does load its module: ``config`` reads the settings (pydantic) and Temporal's
    client configuration, and no other command's libraries (rich for ``watch``, the web stack), nor
    PyYAML where there is no conf.yaml."""
    [loaded] = heavy_modules_loaded_by(["config"])
    assert "config.settings" in loaded and "temporalio.envconfig" in loaded
    assert not [name for name in loaded if name.startswith(("rich", "starlette", "uvicorn", "openai", "yaml"))]


def _handlers(parser: argparse.ArgumentParser) -> list[Command]:
    """Every subcommand's handler that the parser imports on demand, nested subcommands included."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                handler = sub.get_default("handler")
                if isinstance(handler, Command):
                    found.append(handler)
                found.extend(_handlers(sub))
    return found


def test_every_lazy_handler_names_a_coroutine_function_of_its_module() -> None:
    handlers = _handlers(starter.build_parser())
    assert len(handlers) >= 18  # every command but serve and codec-server (starter.py hands those in)
    for handler in handlers:
        target = getattr(importlib.import_module(f"cli.{handler.module}"), handler.name, None)
        assert inspect.iscoroutinefunction(target), f"cli.{handler.module}.{handler.name}"


def test_reading_and_deciding_commands_import_neither_the_workflows_code_nor_the_live_view() -> None:
    """``status``, ``list``, ``review`` and the others send the workflow's handlers by name (the workflow's
    code is a tenth of a second of imports) and draw no live panel (rich): only ``run`` and ``watch`` do."""
    code = ("import sys, cli.runs, cli.operate, cli.research, cli.costs, cli.listing, cli.bulk; "
            "print(' '.join(m for m in sys.modules if m.startswith(('rich', 'workflows.research.workflow'))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.split() == []


def test_without_encryption_keys_no_process_loads_the_cipher_library() -> None:
    """Every command and worker builds the data converter; only one with keys loads cryptography (its
    import was 0.05-0.08 s of each command's CPU), and one with keys still encrypts and decrypts."""
    code = """
import asyncio, sys
from temporalio.api.common.v1 import Payload
from config.settings import load_settings
from runtime.converter import data_converter
from runtime.encryption import EncryptionCodec
data_converter(load_settings())
print("cryptography" in sys.modules)
codec = EncryptionCodec({"k1": bytes(32)})
[sealed] = asyncio.run(codec.encode([Payload(data=b"plain")]))
print(sealed.data != b"plain", asyncio.run(codec.decode([sealed]))[0].data == b"plain")
"""
    env = {name: value for name, value in os.environ.items() if not name.startswith("DEERFLOW_ENCRYPTION")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["False", "True", "True"], done.stderr


# A command process, with importlib.metadata's entry point listing counted: pydantic's plugin discovery
# is the only caller in a command. Prints the calls, then the collector's state after the command.
COUNTING_ENTRY_POINTS = """
import gc, importlib.metadata, sys
calls = []
listing = importlib.metadata.entry_points
importlib.metadata.entry_points = lambda *args, **kwargs: calls.append(kwargs) or listing(*args, **kwargs)
import pytest

import starter
starter.main(sys.argv[1:])
print("entry point listings:", len(calls), "collector:", gc.isenabled(), gc.get_freeze_count() > 0)
"""


@pytest.mark.parametrize(("switch", "listings"), [(None, "0"), ("", "1")])
def test_a_command_looks_for_no_pydantic_plugin_unless_the_operator_asks(switch: str | None, listings: str) -> None:
    """Listing every distribution's entry points was 0.04 s of each command's CPU, for plugins none of
    ours uses; an operator's own PYDANTIC_DISABLE_PLUGINS (empty: look for them) is kept. The collector
    is back on after the imports, with what they built frozen (runtime/process_start.py)."""
    env = {name: value for name, value in os.environ.items() if name != "PYDANTIC_DISABLE_PLUGINS"}
    if switch is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = switch
    done = subprocess.run([sys.executable, "-c", COUNTING_ENTRY_POINTS, "config"], cwd=REPO_DIR, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.splitlines()[-1].split() == ["entry", "point", "listings:", listings, "collector:", "True",
                                                    "True"], done.stderr


def test_reading_and_deciding_commands_build_no_contract_validator_at_import() -> None:
    """Every pydantic model of workflows/ builds its validator when first used (workflows/contracts/base.py):
    built at import, ``list`` built 23 for the content flows it never validates, and every command the
    run state's, the budgets' and the usage's. The one built is the constant ``decisions.OUTSIDE``."""
    code = """
import cli.bulk, cli.listing, cli.runs
from config.settings import load_settings
from pydantic import BaseModel
load_settings()
def models(base):
    for model in base.__subclasses__():
        yield model
        yield from models(model)
print(" ".join(sorted({f"{model.__module__}.{model.__name__}" for model in models(BaseModel)
                       if model.__module__.startswith("workflows.") and model.__pydantic_complete__})))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, capture_output=True, text=True, timeout=120,
                          check=True)
    assert done.stdout.split() == ["workflows.contracts.decisions.Actor"], done.stderr
