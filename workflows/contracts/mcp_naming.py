"""The names under which MCP tools are shown to the model.

Pure and stdlib-only, so the workflow can import it in its sandbox and compute exactly the names the
``mcp_list_tools`` activity produced: the workflow routes a model's tool call back to a server (and
the server's own tool name) by recomputing ``mcp_tool_name(server, tool)``, never by parsing it.

Why this shape: OpenAI function names must match ``^[a-zA-Z0-9_-]{1,64}$``, MCP tool and server
names need not, and two servers may both offer a ``search`` tool. ``mcp_<server>_<tool>`` keeps
names readable and predictable; characters outside the allowed set become ``_``. A name that would
be longer than 64 characters is cut and ends in a short hash of the original pair, so two long
names sharing a prefix stay distinct.

Residual ambiguity, accepted for readability: ``("a_b", "c")`` and ``("a", "b_c")`` both give
``mcp_a_b_c``, and ``"x.y"``/``"x_y"`` sanitize alike. Whoever merges tool lists from several
servers should keep the first of any duplicate name.
"""

from __future__ import annotations

import hashlib
import re

MCP_TOOL_PREFIX = "mcp_"
MAX_TOOL_NAME_CHARS = 64  # OpenAI's limit for function names
HASH_CHARS = 8

_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
VALID_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def sanitize_name_part(value: str) -> str:
    """``value`` with every character OpenAI rejects in a function name replaced by ``_``."""
    return _INVALID.sub("_", value)


def mcp_tool_name(server_name: str, tool_name: str) -> str:
    """The model-facing name of ``tool_name`` on ``server_name``: ``mcp_<server>_<tool>``, valid and <= 64 chars."""
    name = f"{MCP_TOOL_PREFIX}{sanitize_name_part(server_name)}_{sanitize_name_part(tool_name)}"
    if len(name) <= MAX_TOOL_NAME_CHARS:
        return name
    digest = hashlib.sha256(f"{server_name}\0{tool_name}".encode()).hexdigest()[:HASH_CHARS]
    return f"{name[: MAX_TOOL_NAME_CHARS - HASH_CHARS - 1]}_{digest}"


def is_mcp_tool_name(name: str) -> bool:
    """Whether ``name`` is in the namespace ``mcp_tool_name`` produces (a cheap routing pre-check)."""
    return name.startswith(MCP_TOOL_PREFIX) and VALID_TOOL_NAME.match(name) is not None
