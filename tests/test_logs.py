"""LOG_LEVEL and LOG_FORMAT, as a process sets them up (runtime/logs.py; issue #22).

The JSON lines of a real run (workflow and activity records with their run ids) are checked on the
image's worker in tests/test_image_build.py; this checks the level and the shape of each line.
"""

from __future__ import annotations

import json
import subprocess
import sys

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
