"""LOG_LEVEL and LOG_FORMAT, as a process sets them up (runtime/logs.py; issue #22).

The JSON lines of a real run (workflow and activity records with their run ids) are checked on the
image's worker in tests/test_image_build.py; this checks the level and the shape of each line.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.processes import REPO_DIR

SCRIPT = """
import logging
from config.settings import load_settings
from runtime.logs import configure_logging
configure_logging(load_settings())
log = logging.getLogger("probe")
log.debug("debug")
log.info("info")
log.warning("two\\nlines")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("failed")
"""


def logged(**env: str) -> str:
    result = subprocess.run([sys.executable, "-c", SCRIPT], env={"PATH": "/usr/bin:/bin", **env}, cwd=REPO_DIR,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stderr


def test_json_lines_at_the_operators_level() -> None:
    lines = logged(LOG_LEVEL="warning", LOG_FORMAT="JSON").splitlines()
    records = [json.loads(line) for line in lines]
    assert [(record["level"], record["message"]) for record in records] == [("WARNING", "two\nlines"),
                                                                             ("ERROR", "failed")]
    assert records[0]["logger"] == "probe" and records[0]["time"].endswith("+00:00")
    assert "ZeroDivisionError" in records[1]["exception"]


def test_text_by_default_and_debug_when_asked() -> None:
    text = logged(LOG_LEVEL="DEBUG")
    assert " DEBUG probe: debug" in text and " INFO probe: info" in text and not text.startswith("{")


LONE_SCRIPT = """
import logging, sys
from activities.guards.secret_scrubber import ScrubbingLogFilter, SecretScrubber
from config.settings import load_settings
from runtime.logs import configure_logging
configure_logging(load_settings())
if sys.argv[1] == "worker":  # as worker.py does; the API server's log has no scrubber
    for handler in logging.getLogger().handlers:
        handler.addFilter(ScrubbingLogFilter(SecretScrubber(["sk-canary-0123456789abcdef"])))
log = logging.getLogger("probe")
log.warning("page says %s", "lone \\ud800 high, \\udcff low, pair \\ud83d\\ude00")
try:
    raise ValueError("refused sk-canary-0123456789abcdef for \\udcff")
except ValueError:
    log.exception("failed")
"""


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("process", ["worker", "server"])
def test_log_lines_are_utf_8_with_lone_surrogates_replaced(log_format: str, process: str) -> None:
    """A process's log on a pipe: a lone surrogate in a message or a traceback is U+FFFD (standard
    error wrote it as its escape, which a JSON line then carried as a lone surrogate again), and in
    a worker's a secret in a traceback is scrubbed, in JSON lines too (they formatted it afresh)."""
    result = subprocess.run([sys.executable, "-c", LONE_SCRIPT, process], cwd=REPO_DIR, capture_output=True,
                            env={"PATH": "/usr/bin:/bin", "LOG_FORMAT": log_format}, timeout=60, check=False)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    text = result.stderr.decode("utf-8")  # strictly
    lines = [json.loads(line) for line in text.splitlines()] if log_format == "json" else None
    shown = "\n".join(f"{line['message']}\n{line.get('exception', '')}" for line in lines) if lines else text
    assert "page says lone \ufffd high, \ufffd low, pair \U0001f600" in shown
    assert "\\ud800" not in shown and "\\udcff" not in shown
    if process == "worker":
        assert "refused [redacted] for \ufffd" in shown and "sk-canary" not in shown
    else:
        assert "refused sk-canary-0123456789abcdef for \ufffd" in shown
