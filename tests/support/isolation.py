"""What keeps each pytest process out of the way of the other (``pytest -n 2``) and of the checkout's state.

tests/test_python_sandbox.py finds the sandbox processes left on the machine, asserts there are
none and kills them. Tests of one module run in both processes at once, so without a pool of
sandbox uids and a temp directory per process each would see, and kill, the other's runs and
start-up probe (a probe killed that way refuses the sandbox for the rest of the session).

The checkout's ``.deerflow/`` (the product's default ``DEERFLOW_HOME``) belongs to whoever runs the
product there: a ``starter.py serve`` announces its token stream in it, and a worker that finds the
announcement streams every model turn (issue #42, item 8: three tests failed while a serve ran);
what earlier runs left there (tool-support verdicts, blobs, in-flight journals, pid files) would
reach the suite's workers too, and the suite would delete that serve's verdicts. So each pytest
process has a home of its own: every process it starts inherits it, and every ``Settings`` it
builds defaults to it, whether loaded from the environment or from a test's own variables.

Nor are the checkout's ``.env`` and ``conf.yaml`` the suite's: they are its developer's (a key, a model
server, ``LLM_TOOL_MODE=json``), and the suite runs in the checkout, so every ``Settings`` loaded without
naming its files read them (with a developer's ``.env`` naming a model and the JSON tool mode, a test of
JSON mode's fallback and a slide composer's deep reply failed). Each pytest process names files of its
own that do not exist, for its settings and its children alike; a test that wants a file writes its own.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cli.command_client import SWITCH as COMMAND_SERVER_SWITCH
from config.settings import Settings

SANDBOX_UID_BASE = 64064  # above the default 64000, which tests/test_sandbox_deployment.py's worker keeps
CHECKOUT_HOME: Path = Settings.model_fields["home"].default  # the product's default: the checkout's .deerflow
CHECKOUT_FILES = [CHECKOUT_HOME.parent / Settings.model_fields[name].default for name in ("conf_path", "env_file")]


def isolate_this_process() -> str:
    """Give this pytest process (and the workers it starts, who inherit the environment) its own
    sandbox uid pool, temp directory and home; returns the directory, for the caller to remove."""
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    os.environ["DEERFLOW_SANDBOX_UID_BASE"] = str(SANDBOX_UID_BASE + 64 * index)
    # Commands run in processes of their own, as a fresh interpreter runs them: no command server
    # outlives the suite (tests/test_command_server.py turns it on for its own runtime folder).
    os.environ[COMMAND_SERVER_SWITCH] = "off"
    own_tmp = tempfile.mkdtemp(prefix=f"deerflow-tests-gw{index}-")
    os.chmod(own_tmp, 0o1777)  # like /tmp: processes of other uids started by tests use it too
    os.environ["TMPDIR"] = own_tmp
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    use_home(Path(own_tmp) / "home")
    use_config_files(Path(own_tmp) / "absent-conf.yaml", Path(own_tmp) / "absent.env")
    return own_tmp


def use_home(home: Path) -> None:
    """``home`` instead of the checkout's ``.deerflow`` for this process's settings and its children."""
    os.environ["DEERFLOW_HOME"] = str(home)
    Settings.model_fields["home"].default = home
    Settings.model_rebuild(force=True)


def use_config_files(conf: Path, env_file: Path) -> None:
    """``conf`` and ``env_file`` instead of ``./conf.yaml`` and ``./.env`` (the checkout's, in the suite's
    working directory) for this process's settings and its children."""
    os.environ["DEERFLOW_CONF"], os.environ["DEERFLOW_ENV_FILE"] = str(conf), str(env_file)
    Settings.model_fields["conf_path"].default = conf
    Settings.model_fields["env_file"].default = env_file
    Settings.model_rebuild(force=True)
