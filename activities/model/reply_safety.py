"""A model's reply made fit to leave the ``chat`` activity, whatever the provider sent (issue #42 §2).

The reply becomes the activity's result, a payload: a lone surrogate (a ``"\\ud800"`` escape in the
provider's JSON decodes to one) cannot be encoded as UTF-8, and tool-call arguments nested a few
hundred levels deep exceed the serializer's depth. Either failed the activity's result after the
call, so the turn was retried with the same reply until its attempts ran out. Here a lone surrogate
reads as U+FFFD, and arguments nested deeper than ``MAX_ARGUMENT_DEPTH`` become invalid arguments,
which the agent loop answers with an error the model reads, as it answers arguments that are not
JSON.
"""

from __future__ import annotations

from workflows.contracts.chat import ToolCall
from workflows.text.untrusted_text import nested_deeper, scrubbed, without_lone_surrogates

# Deeper than any tool's arguments (an MCP tool's schema rarely nests 4 levels).
MAX_ARGUMENT_DEPTH = 32
TOO_DEEP = f"(arguments nested deeper than {MAX_ARGUMENT_DEPTH} levels)"


def safe_call(call: ToolCall) -> ToolCall:
    """``call`` with its name, id and arguments fit to carry."""
    invalid = call.invalid_arguments
    arguments = call.arguments
    if nested_deeper(arguments, MAX_ARGUMENT_DEPTH):
        arguments, invalid = {}, TOO_DEEP
    return ToolCall(id=without_lone_surrogates(call.id), name=without_lone_surrogates(call.name),
                    arguments=scrubbed(arguments),
                    invalid_arguments=None if invalid is None else without_lone_surrogates(invalid))


def safe_reply(content: str, calls: list[ToolCall]) -> tuple[str, list[ToolCall]]:
    """The reply's text and tool calls, fit to carry (see the module's docstring)."""
    return without_lone_surrogates(content), [safe_call(call) for call in calls]
