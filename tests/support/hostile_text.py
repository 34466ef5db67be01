"""Every handler of untrusted text we have, and the worst text we know for them (issue #42 §1).

Shared by the property tests (tests/test_hostile_text.py), which feed each handler these shapes
under a time budget, and the bench (bench/hostile_text.py), which times each handler on a megabyte
of them. A handler is called with one text and returns nothing useful: it must only end, with at
most the errors it is documented to raise (each wrapper lets those through and no other).

The shapes: deep brackets, long runs of one character, a prefix repeated (each unit below made one
of the patterns this project used, or DeerFlow uses, scan from every repeat to the end of the text),
lone surrogates and mixed line ends.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from mcp import types as mcp_types
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ValidationError

from activities.documents.chunk import chunk_text
from activities.documents.extract import markdown_title
from activities.documents.tokens import query_terms
from activities.guards.secret_scrubber import SecretScrubber
from activities.guards.url_guard import display_url
from activities.mcp.lenient_wire import mended
from activities.mcp.tools import format_content
from activities.model.context_budget import count_tokens
from activities.model.json_tools import parse_action
from activities.model.reply_safety import safe_reply
from activities.model.tool_support import refuses_tools
from activities.web.decode import decode_body
from activities.web.page_text import prepare_html
from activities.web.search_providers._http import plain_text
from cli.terminal import printable, printable_json
from server.content import prose_request
from server.security import RequestError, parsed_body
from workflows.calls.activity_options import summary_text, url_host
from workflows.contracts.chat import ToolCall
from workflows.contracts.enhance import enhanced_text
from workflows.contracts.evaluation import parse_judgement
from workflows.contracts.podcast import NoScript, script_from_reply, without_markup
from workflows.contracts.report_metrics import compute_metrics
from workflows.contracts.slides import NoDeck, deck_from_reply
from workflows.contracts.tool_activities import MCPCallResult, SearchResult
from workflows.research.findings import finding_preview
from workflows.research.found_urls import url_key, urls_in
from workflows.research.plan_parsing import PlanParseError, parse_plan
from workflows.text.markdown_links import links
from workflows.text.reply_json import ReplyNotJson, reply_json

# Repeated, each of these made a pattern of ours or DeerFlow's quadratic (or worse).
UNITS = (
    " ", "\t", "[", "![", "](", "[](", "[](http://", "](http://a", "<", "<a", "<mark ", "<meta", "<?xml", "```",
    "```json ", "#", "# a ", "title: a ", "*", "\x9d", "\x1b]", "\x9b0", "技术", "investment", "key ", "http://",
    "\\", '"', '\\"', "{", '{"a":', "\\u", "\ud800", "a", "-", "\r\n", "\r", "\u2028",
)
PAIRS = ("[]", "{}", "()", "<>")
# A run of blanks between these: a heading's or a title's text, a fenced reply, a tag (a lazy group
# tried the trailing blanks from each position: 20,000 in a heading took 20 s).
UNDER_A_CAP = 19_000  # blanks that fit in a prefix a handler reads (a title is looked for in the first 20,000)
BLANKS_BETWEEN = (("# a", "b\n"), ("---\ntitle: a", "b\n---\n"), ("```json\n{", "x"), ("<mark", "x"), ("[a](", "x"))


def run_of(unit: str, size: int) -> str:
    """``unit`` repeated to ``size`` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def nested(pair: str, size: int) -> str:
    """``size`` characters of ``pair`` opened then closed (half of each), e.g. "[[[…]]]"."""
    return pair[0] * (size // 2) + pair[1] * (size - size // 2)


def shapes(size: int) -> dict[str, str]:
    """Every shape at ``size`` characters, by name: each unit's run, bare and framed (a line "x", the run
    from a line's start, a line "x": what ``strip`` leaves inside, and a pattern scanning on fails at),
    each pair nested, and every line end mixed."""
    return {**{f"run of {unit!r}": run_of(unit, size) for unit in UNITS},
            **{f"framed run of {unit!r}": "x\n" + run_of(unit, size - 4) + "\nx" for unit in UNITS},
            **{f"nested {pair}": nested(pair, size) for pair in PAIRS},
            "mixed line ends": run_of("a\r\nb\rc\n\u2028\u2029\x85\v\f", size),
            **{f"{head!r}, {label} blanks, {tail!r}": head + " " * blanks + tail for head, tail in BLANKS_BETWEEN
               for label, blanks in (("all", size - len(head) - len(tail)), (f"{UNDER_A_CAP:,}", UNDER_A_CAP))}}


def _quietly(run: Callable[[str], Any], *allowed: type[BaseException], carries: bool = True) -> Callable[[str], None]:
    """``run``, with the errors it documents (``allowed``) taken as an answer; what it returns must be
    fit to carry (a payload, a response, a log line: UTF-8, so no lone surrogate), unless ``carries``
    is False: a handler only ever given text a payload carried already (so none)."""
    def call(text: str) -> None:
        with contextlib.suppress(*allowed):
            result = run(text)
            if carries:
                carried(result)
    return call


def carried(value: Any) -> None:
    """Encode ``value`` as a payload would: pydantic's JSON, else JSON, in UTF-8 (raises if it cannot)."""
    if isinstance(value, BaseModel):
        value.model_dump_json()
    elif isinstance(value, bytes):
        return
    else:
        json.dumps(value, ensure_ascii=False, default=repr).encode("utf-8")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _mcp_tool_output(text: str) -> MCPCallResult:
    """A tool's ``text`` as a server's JSON-RPC line carries it (a lone surrogate as its escape), read
    as the MCP client reads a line: strictly, then leniently (activities/mcp/lenient_wire.py)."""
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": text}]}})
    try:
        item: SessionMessage | Exception = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        item = SessionMessage(item)
    except ValidationError as refused:
        item = mended(refused)
    assert isinstance(item, SessionMessage) and isinstance(item.message, mcp_types.JSONRPCResponse), item
    return MCPCallResult(content=format_content(mcp_types.CallToolResult.model_validate(item.message.result)))


_SCRUBBER = SecretScrubber(["sk-live-0123456789abcdef"])

# Each handler of text a request, a model, a page, a search result or a document sent, by where it runs.
# ``carries=False``: given only text a payload carried already, or bytes decoded with "replace", so
# never a lone surrogate; the others are given what an outsider sent, and must leave none.
HANDLERS: dict[str, Callable[[str], None]] = {
    # workflow code: model replies, a request's report
    "reply_json": _quietly(reply_json, ReplyNotJson),
    "slide_deck": _quietly(deck_from_reply, NoDeck),
    "podcast_script": _quietly(script_from_reply, NoScript),
    "judgement": _quietly(parse_judgement),
    "plan": _quietly(lambda text: parse_plan(text, 3, "en-US"), PlanParseError),
    "enhanced_prompt": _quietly(lambda text: enhanced_text(text, "original"), carries=False),
    "podcast_markup": _quietly(without_markup, carries=False),
    "report_metrics": _quietly(lambda text: compute_metrics(text, "strategic_investment")),
    "activity_summary": _quietly(lambda text: (summary_text(text), url_host(text)), carries=False),
    "url_key": _quietly(url_key, carries=False),  # of a URL a search result or tool call carried
    "found_urls": _quietly(urls_in),
    "finding_preview": _quietly(finding_preview, carries=False),
    "markdown_links": _quietly(lambda text: (list(links(text, "[", "web")), list(links(text, "![", "nonempty")))),
    # the API server: request bodies
    "request_body": _quietly(lambda text: parsed_body(_bytes(text)), RequestError),
    "prose_request": _quietly(lambda text: prose_request({"prompt": text, "option": "improve"}), ValidationError),
    # activities: model replies, pages, search results, documents
    "model_reply": _quietly(lambda text: safe_reply(text, [ToolCall(id="c", name=text[:64], arguments={"q": text})])),
    "json_tool_action": _quietly(lambda text: safe_reply(*parse_action(text, []))),  # as the chat activity
    "tool_refusal": _quietly(refuses_tools),
    "token_estimate": _quietly(count_tokens),
    "secret_scrubber": _quietly(_SCRUBBER.scrub),  # of payloads and log lines: whatever an activity or a library sent
    "url_display": _quietly(display_url, carries=False),  # of a tool call's carried arguments
    "mcp_tool_output": _quietly(_mcp_tool_output),
    "search_snippet": _quietly(lambda text: SearchResult(title=plain_text(text), url="u", content=plain_text(text))),
    "page_decoding": _quietly(lambda text: decode_body(_bytes(text), None)),
    "page_text": _quietly(lambda text: prepare_html(text, 20_000)),
    "document_title": _quietly(markdown_title),
    "document_chunks": _quietly(chunk_text, carries=False),
    "document_terms": _quietly(query_terms),
    # the CLI: whatever a run holds, shown in a terminal
    # of what runs carried, and what the user's arguments and files hold (bytes Python escaped)
    "terminal": _quietly(lambda text: (printable(text), printable_json(text))),
}
