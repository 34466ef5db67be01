"""JSON tool mode's wire words (issue #24): what the chat activity writes and the offline model reads.

The activity (``activities/model/json_tools.py``) asks a model that cannot call tools for one action
object and sends tool outputs back as user text; the bundled fake model (``offline/json_tool_mode.py``)
reads the same request back into native tool calls. Both sit above this layer and neither may import
the other, so the words they must agree on live here, once.
"""

from __future__ import annotations

import re

SCHEMA_NAME = "tool_action"  # the json_schema's name: how a reader knows a request is in JSON mode
FINAL_ACTION = "final_answer"  # the action that answers instead of calling a tool
# A tool's output as the model reads it back: "Result of web_search (call_1):\n…".
RESULT_HEADER = "Result of {name} ({call_id}):\n"
RESULT_RE = re.compile(r"\AResult of (?P<name>[\w.-]+) \((?P<call_id>[^)\s]+)\):\n")
