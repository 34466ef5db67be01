"""Logging of every long-running process (worker, API server, codec server): level and format.

``LOG_LEVEL`` (default INFO) and ``LOG_FORMAT`` (``text``, default, or ``json``), both settings
(config/settings.py), set up once by each process's entry point. ``json`` writes one object per
line, for a log pipeline to index without parsing prose: time, level, logger, message and, where
the record comes from a run, its ``workflow_id``, ``run_id``, ``workflow_type``, ``activity_type``,
``activity_id`` and ``attempt``. The SDK's ``workflow.logger`` and ``activity.logger`` attach those;
a plain module logger called inside an activity gets them from the activity's context here.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from temporalio import activity, workflow
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from config.settings import Settings
from runtime.text_streams import replace_lone_surrogates_on_output

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The SDK's names for a run's details, and ours in the JSON object (one name for the run id).
_RUN_FIELDS = {"workflow_id": "workflow_id", "run_id": "run_id", "workflow_run_id": "run_id",
               "workflow_type": "workflow_type", "activity_type": "activity_type", "activity_id": "activity_id",
               "attempt": "attempt", "task_queue": "task_queue"}


def run_details(record: logging.LogRecord) -> dict[str, Any]:
    """The run a record was logged for, as far as it is known: workflow first, then activity details."""
    found: dict[str, Any] = {}
    for source in (getattr(record, "temporal_workflow", None), getattr(record, "temporal_activity", None)):
        if isinstance(source, Mapping):
            found.update({_RUN_FIELDS[key]: value for key, value in source.items() if key in _RUN_FIELDS})
    return found


class ActivityContext(logging.Filter):
    """Gives a record logged inside an activity, by any logger, the activity's details."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "temporal_activity") and activity.in_activity():
            info = activity.info()
            record.temporal_activity = {
                "activity_id": info.activity_id, "activity_type": info.activity_type, "attempt": info.attempt,
                "task_queue": info.task_queue, "workflow_id": info.workflow_id,
                "workflow_run_id": info.workflow_run_id, "workflow_type": info.workflow_type}
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a message's own newlines are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
            **run_details(record)}
        if record.exc_info:
            # The text a filter left (the worker's scrubs secrets out of it), else the traceback's own.
            entry["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def core_logging(settings: Settings) -> LoggingConfig:
    """The SDK core's own (Rust) records forwarded to the ``temporalio.core`` logger, so they come out in
    the same format instead of the core's coloured text on standard error."""
    level = {"DEBUG": "DEBUG", "ERROR": "ERROR", "CRITICAL": "ERROR"}.get(settings.log_level, "WARN")
    return LoggingConfig(filter=TelemetryFilter(core_level=level, other_level="ERROR"),
                         forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")))


def configure_logging(settings: Settings) -> None:
    """The root logger's one handler (standard error), at ``settings.log_level`` in ``settings.log_format``;
    standard output and error write U+FFFD for a lone surrogate (runtime/text_streams.py).

    In JSON the SDK's loggers leave the run's details out of the message, since they are fields. The
    default Temporal runtime (every client's unless given another) forwards the core's records too:
    call this before any client is built.
    """
    replace_lone_surrogates_on_output()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ActivityContext())
    json_lines = settings.log_format == "json"
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    activity.logger.activity_info_on_message = not json_lines
    workflow.logger.workflow_info_on_message = not json_lines
    logging.basicConfig(level=settings.log_level, handlers=[handler], force=True)
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=core_logging(settings))), error_if_already_set=False)
