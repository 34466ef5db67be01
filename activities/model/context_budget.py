"""The context budget: trim a conversation to the model's context window before each model turn.

DeerFlow's ``ContextManager`` does this for its agents; without it a researcher that crawls a few
long pages sends more tokens than the model accepts, the provider answers HTTP 400
(``context_length_exceeded``) and the step fails for good. Here the ``chat`` activity calls
:func:`fit_to_budget` on every turn. The workflow keeps the full conversation in its history; only
the copy sent to the provider is trimmed, so every turn starts again from the complete record.

Token counts are an offline estimate (:func:`count_tokens`): tokenizers such as tiktoken download
their vocabularies on first use, which a worker without network cannot do, and the exact count
differs between providers anyway. The estimate errs on the high side, because over-estimating
costs a little unused context while under-estimating makes the provider reject the call.

Everything here is pure and deterministic: the same input gives the same trimmed conversation, so
a retried activity sends the same request.
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workflows.contracts.chat import ChatMessage

# Fixed costs of OpenAI's chat format: each message is wrapped in role/separator tokens (3-4 in
# OpenAI's cookbook), every reply is primed with a few more, each tool call carries an id and a
# type besides its name and arguments, and each tool schema is wrapped in a namespace entry.
MESSAGE_OVERHEAD = 4
REQUEST_OVERHEAD = 3
TOOL_CALL_OVERHEAD = 8
TOOL_SCHEMA_OVERHEAD = 8
# Open-weight chat templates wrap the schemas in instructions on how to call them: Qwen2.5's
# Hermes-style "# Tools ... <tools></tools> ... <tool_call>" text is 106 tokens in SmolLM2's
# tokenizer (tests/fixtures/token_counts.json), paid once per request that offers any tool.
TOOL_PREAMBLE_OVERHEAD = 128

DEFAULT_TOKEN_LIMIT = 32_000
MAX_OUTPUT_RESERVE = 8_192

# Floors of the trimming phases, in content tokens. An old tool output keeps at least a short
# excerpt (``budget // 16`` within these bounds) before whole tool-call turns are dropped.
TOOL_EXCERPT_MIN = 128
TOOL_EXCERPT_MAX = 2_048
LAST_RESORT_TOKENS = 48

# ---------------------------------------------------------------- token estimate

# The estimate works on character classes: runs of ASCII letters, digits and punctuation (what a
# GPT-style byte-pair tokenizer splits text into before merging), whitespace, CJK and the rest.
# It is computed with bytes.translate, bytes.replace and bytes.count, which run at C speed: a
# regular expression over every character of ten crawled pages costs a third of a second a turn.
_CJK = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3200-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff"
)
_HANGUL = "\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7ff"  # a subset of _CJK
_CJK_CHARS = re.compile(f"[{_CJK}]+")
_HANGUL_CHARS = re.compile(f"[{_HANGUL}]+")
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")


@dataclass(frozen=True)
class ScriptWeights:
    """Tokens per CJK character (Han, kana) and per Hangul syllable, which differ most between
    tokenizers: the rest of the estimate holds for all of them."""

    cjk: float
    hangul: float


# Set from real tokenizers' counts (tests/fixtures/token_counts.json). SmolLM2's English-centric
# byte-level BPE spends 1.84-1.88 tokens on a Han or kana character of prose and 2.7 on a Hangul
# syllable, whose three UTF-8 bytes rarely merge (three is a byte-level BPE's maximum): any model
# the product does not know is assumed to tokenize like that.
ENGLISH_CENTRIC = ScriptWeights(cjk=2.25, hangul=3.0)
# Tokenizers with a large CJK vocabulary: Qwen2's spends 0.66 tokens on a Chinese character of
# prose, 0.77 on Japanese and 1.08 on a Hangul syllable; o200k (GPT-4o and later) and DeepSeek's
# are as thrifty. Estimating those models' CJK text like SmolLM2's would trim Chinese research to
# a third of the window, so they get their own weights, still a third to a half above the counts.
LARGE_CJK_VOCABULARY = ScriptWeights(cjk=1.0, hangul=1.5)
_LARGE_CJK_VOCABULARY_MODELS = re.compile(
    r"gpt-4o|chatgpt-4o|gpt-4\.1|gpt-5|(^|/)o[134](-|$)|qwen|deepseek|doubao|glm|kimi|moonshot|(^|/)yi-"
    r"|baichuan|minimax|hunyuan|ernie")


def script_weights_for(model_name: str) -> ScriptWeights:
    """The CJK weights for a model, by its family; a model not known to be thrifty gets the high ones."""
    return LARGE_CJK_VOCABULARY if _LARGE_CJK_VOCABULARY_MODELS.search(model_name.lower()) else ENGLISH_CENTRIC

_VISIBLE = (string.ascii_letters + string.digits + string.punctuation).encode()


def _view(keep: str) -> bytes:
    """A ``bytes.translate`` table turning the characters in ``keep`` into ``x``, all others into spaces."""
    return bytes(ord("x") if chr(code) in keep else ord(" ") for code in range(256))


_LETTERS = _view(string.ascii_letters)
_DIGIT_BYTES = string.digits.encode()
_PUNCTUATION = _view(string.punctuation)
_LINE_BREAKS = _view("\r\n")


def _class_runs(data: bytes, view: bytes, shortest: int) -> tuple[int, list[int]]:
    """Characters of ``view``'s class in ``data``, and how many of its runs are 1..``shortest`` long.

    A run at least ``n`` long is a space followed by ``n`` marks; such matches cannot overlap, so
    ``bytes.count`` counts them all, and runs of exactly ``n`` are the difference of two counts.
    """
    marked = b" " + data.translate(view)
    at_least = [marked.count(b" " + b"x" * size) for size in range(1, shortest + 2)]
    return marked.count(b"x"), [at_least[i] - at_least[i + 1] for i in range(shortest)]


def count_tokens(text: str, weights: ScriptWeights = ENGLISH_CENTRIC) -> int:
    """An offline, deliberately high estimate of how many tokens ``text`` costs.

    * ASCII letters: 4 a token, but at least one token a run (a word). With the space before it,
      an English word averages 1.4 tokens here against 1.2-1.3 in cl100k/o200k.
    * digits: one token each. Qwen, DeepSeek, SmolLM2 and Llama 2 split numbers into single
      digits; cl100k/o200k group up to three, so tables of numbers are over-counted for them.
    * ASCII punctuation: 2 a token, at least one a run.
    * whitespace and control characters: 4 a token; a run of line breaks at least one.
    * CJK characters: ``weights.cjk`` tokens each, Hangul ``weights.hangul``. cl100k spends about
      one token on a common Han character, o200k, Qwen and DeepSeek less, but tokenizers trained
      mostly on English (SmolLM2, Llama 2, Mistral) two or three: the default follows them, and
      ``script_weights_for`` gives the thrifty families their own.
    * any other character: its UTF-8 length less one, so one token for Cyrillic, Greek or
      accented Latin, two for other scripts and symbols (dashes, arrows), three for emoji, whose
      bytes rarely merge in a byte-level tokenizer.

    Every ASCII character weighs at least 1/4 and every other at least 1, so the estimate is never
    below ``len(text) / 4``. Random letter strings (hashes, base64) are what it under-counts; in
    practice digits and punctuation split them into many short, minimum-cost runs.
    """
    if not text:
        return 0
    data = text.encode("ascii", "ignore")
    letters, short_words = _class_runs(data, _LETTERS, 3)
    punctuation, single_marks = _class_runs(data, _PUNCTUATION, 1)
    _, short_breaks = _class_runs(data, _LINE_BREAKS, 3)
    total = letters / 4 + sum(runs * (1 - size / 4) for size, runs in enumerate(short_words, start=1))
    total += len(data) - len(data.translate(None, _DIGIT_BYTES))
    total += punctuation / 2 + single_marks[0] / 2
    total += len(data.translate(None, _VISIBLE)) / 4
    total += sum(runs * (1 - size / 4) for size, runs in enumerate(short_breaks, start=1))
    if len(data) < len(text):
        rest = _ASCII_RUNS.sub("", text)
        other = _CJK_CHARS.sub("", rest)
        hangul = len(rest) - len(_HANGUL_CHARS.sub("", rest))
        total += weights.cjk * (len(rest) - len(other) - hangul) + weights.hangul * hangul
        total += len(other.encode("utf-8", "surrogatepass")) - len(other)
    return math.ceil(total)


def count_message_tokens(message: ChatMessage, weights: ScriptWeights = ENGLISH_CENTRIC) -> int:
    """Estimated tokens of one message as the provider sees it: content, name, tool calls, ids."""
    return count_tokens(message.content, weights) + _metadata_tokens(message, weights)


def _metadata_tokens(message: ChatMessage, weights: ScriptWeights) -> int:
    """Everything of a message but its content; kept apart so trimming need not recount pages."""
    tokens = MESSAGE_OVERHEAD
    if message.name:
        tokens += count_tokens(message.name, weights)
    if message.tool_call_id:
        tokens += count_tokens(message.tool_call_id, weights)
    for call in message.tool_calls:
        arguments = call.invalid_arguments if call.invalid_arguments is not None else json.dumps(
            call.arguments, ensure_ascii=False)
        tokens += TOOL_CALL_OVERHEAD + sum(count_tokens(part, weights) for part in (call.id, call.name, arguments))
    return tokens


def count_tool_tokens(tools: Sequence[Mapping[str, Any]], weights: ScriptWeights = ENGLISH_CENTRIC) -> int:
    """Estimated tokens of the tool schemas (OpenAI ``tools`` entries) sent with a request.

    OpenAI renders the schemas more compactly than JSON; open-weight chat templates paste the JSON
    into the system prompt under instructions on how to call a tool (``TOOL_PREAMBLE_OVERHEAD``).
    """
    if not tools:
        return 0
    return TOOL_PREAMBLE_OVERHEAD + sum(
        TOOL_SCHEMA_OVERHEAD + count_tokens(json.dumps(tool, ensure_ascii=False), weights) for tool in tools)


def count_request_tokens(system_prompt: str, messages: Sequence[ChatMessage], tools_tokens: int,
                         weights: ScriptWeights = ENGLISH_CENTRIC) -> int:
    """Estimated prompt tokens of a whole request: system prompt, messages and tool schemas."""
    return (REQUEST_OVERHEAD + MESSAGE_OVERHEAD + count_tokens(system_prompt, weights) + tools_tokens
            + sum(count_message_tokens(message, weights) for message in messages))


def output_reserve(limit: int) -> int:
    """Tokens kept free for the reply: a quarter of the window, at most 8k (a long report)."""
    return min(MAX_OUTPUT_RESERVE, limit // 4)


# ---------------------------------------------------------------- context windows

# (pattern on the lower-cased model name, context window). First match wins, so specific names
# come before their family. Values are rounded down to be safe: 128_000 for a 131_072 window.
_KNOWN_WINDOWS: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(pattern), window)
    for pattern, window in (
        (r"deerflow-offline", 32_000),
        (r"gpt-4\.1", 1_000_000),
        (r"gpt-5", 272_000),  # 400k window, of which 272k may be input
        (r"gpt-4o|chatgpt-4o", 128_000),
        (r"gpt-4-32k", 32_000),
        (r"gpt-4-(turbo|vision|1106|0125)", 128_000),
        (r"gpt-4", 8_000),
        (r"gpt-3\.5", 16_000),
        (r"(^|/)o1-(mini|preview)", 128_000),
        (r"(^|/)o[134](-|$)", 200_000),
        (r"claude", 200_000),
        (r"gemini-1\.0|gemini-pro$", 32_000),
        (r"gemini", 1_000_000),
        (r"deepseek.*v3\.[12]", 128_000),
        (r"deepseek", 64_000),
        (r"qwen-(plus|turbo|long)", 128_000),
        (r"qwen", 32_000),
        (r"doubao-seed", 128_000),
        (r"doubao", 32_000),
        (r"llama-?(3\.[1-9]|4)", 128_000),
        (r"llama", 8_000),
        (r"kimi|moonshot", 128_000),
    )
)
# An explicit window in the name, as in "doubao-pro-32k", "moonshot-v1-128k" or "gpt-4-32k".
_SIZE_IN_NAME = re.compile(r"(?:^|[-_/:])(\d{1,4})k(?:$|[-_/:.])")


def token_limit_for(model_name: str, configured: int | None) -> int:
    """The context window to budget for: the configured value, else one inferred from the name.

    Unknown models get 32k, the smallest window of a current chat model, so an unknown provider
    sees short requests rather than rejected ones. Set ``TOKEN_LIMIT`` for a larger window.
    """
    if configured is not None and configured > 0:
        return configured
    name = model_name.strip().lower()
    sized = _SIZE_IN_NAME.search(name)
    if sized:
        return int(sized.group(1)) * 1000
    for pattern, window in _KNOWN_WINDOWS:
        if pattern.search(name):
            return window
    return DEFAULT_TOKEN_LIMIT


# ---------------------------------------------------------------- excerpts


def _marker(trimmed_chars: int) -> str:
    return f"\n\n[… {trimmed_chars:,} characters trimmed to fit the context window …]\n\n"


def excerpt(text: str, max_tokens: int, text_tokens: int | None = None,
            weights: ScriptWeights = ENGLISH_CENTRIC) -> str:
    """``text`` cut to at most ``max_tokens`` (estimated): its head and tail around a marker.

    The head gets two thirds: pages and findings put what matters first, and the tail keeps
    conclusions and reference lists. Cuts move back to a line or word boundary when one is near.
    If even the bare marker is over ``max_tokens``, the bare marker is returned. ``text_tokens``
    is ``count_tokens(text)`` when the caller knows it already (counting a long page is not free).
    """
    total = count_tokens(text, weights) if text_tokens is None else text_tokens
    if total <= max_tokens:
        return text
    marker_tokens = count_tokens(_marker(len(text)), weights)
    keep = max(0, len(text) * (max_tokens - marker_tokens) // total)
    while True:
        head_end = _boundary_before(text, keep * 2 // 3)
        tail_start = _boundary_after(text, len(text) - (keep - keep * 2 // 3))
        candidate = text[:head_end] + _marker(tail_start - head_end) + text[tail_start:]
        if keep == 0 or count_tokens(candidate, weights) <= max_tokens:
            return candidate
        keep = min(keep - 1, keep * 7 // 8)


_SNAP = 200  # how far (characters) a cut may move to reach a line or word boundary


def _boundary_before(text: str, position: int) -> int:
    if position <= 0:
        return 0
    window = text[max(0, position - _SNAP):position]
    for separator in ("\n", " "):
        found = window.rfind(separator)
        if found >= 0:
            return position - len(window) + found + 1
    return position


def _boundary_after(text: str, position: int) -> int:
    if position >= len(text):
        return len(text)
    window = text[position:position + _SNAP]
    for separator in ("\n", " "):
        found = window.find(separator)
        if found >= 0:
            return position + found + 1
    return position


# ---------------------------------------------------------------- fitting


@dataclass
class _Conversation:
    """The messages being trimmed: ``None`` marks a dropped one; token counts are cached."""

    messages: list[ChatMessage | None]
    content_tokens: list[int]
    metadata_tokens: list[int]
    fixed: int  # system prompt, tool schemas, request overhead
    allowed: int  # limit minus the output reserve
    weights: ScriptWeights
    _tokens: int = field(init=False, default=0)  # content plus metadata tokens of the kept messages

    @classmethod
    def of(cls, messages: Sequence[ChatMessage], fixed: int, allowed: int, weights: ScriptWeights) -> _Conversation:
        return cls(list(messages), [count_tokens(message.content, weights) for message in messages],
                   [_metadata_tokens(message, weights) for message in messages], fixed, allowed, weights)

    def __post_init__(self) -> None:
        # Kept as a running total: summing both lists on every ``shrink`` made trimming quadratic
        # in the number of messages.
        self._tokens = sum(self.content_tokens) + sum(self.metadata_tokens)

    @property
    def overflow(self) -> int:
        return self.fixed + self._tokens - self.allowed

    def shrink(self, index: int, floor: int) -> None:
        """Cut message ``index`` by the overflow, but not below ``floor`` content tokens."""
        message = self.messages[index]
        overflow = self.overflow
        if message is None or overflow <= 0:
            return
        content_tokens = self.content_tokens[index]
        target = max(floor, content_tokens - overflow)
        if target >= content_tokens:
            return
        content = excerpt(message.content, target, content_tokens, self.weights)
        self.messages[index] = message.model_copy(update={"content": content})
        shrunk = count_tokens(content, self.weights)
        self._tokens -= content_tokens - shrunk
        self.content_tokens[index] = shrunk

    def drop(self, unit: list[int]) -> None:
        for index in unit:
            self._tokens -= self.content_tokens[index] + self.metadata_tokens[index]
            self.messages[index] = None
            self.content_tokens[index] = self.metadata_tokens[index] = 0


def _units(messages: Sequence[ChatMessage]) -> list[list[int]]:
    """Group indexes into units that are kept or dropped together.

    An assistant message with tool calls and the tool messages right after it that answer those
    calls form one unit: OpenAI rejects a tool message without its call, and a call without its
    results. Every other message is a unit of its own.
    """
    units: list[list[int]] = []
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool" and message.tool_call_id in open_calls and units:
            units[-1].append(index)
            continue
        units.append([index])
        open_calls = {call.id for call in message.tool_calls} if message.role == "assistant" else set()
    return units


def fit_to_budget(
    system_prompt: str,
    messages: list[ChatMessage],
    tools_tokens: int,
    limit: int,
    reserve_for_output: int,
    weights: ScriptWeights = ENGLISH_CENTRIC,
) -> list[ChatMessage]:
    """``messages`` trimmed so that the whole request fits in ``limit`` minus the output reserve.

    The system prompt, the first user message (the task) and the most recent unit (the last
    message with its tool call or results) are kept. Until the request fits, in this order:

    1. tool outputs, oldest first, are cut to a head+tail excerpt, each just as much as needed
       but not below a short floor, so every page the agent read leaves a trace and the newest
       page, cut last, keeps the most;
    2. whole middle turns (an assistant tool-call message with its results) are dropped, oldest
       first, so the newest tool results survive longest;
    3. the middle of the first user message is cut (it keeps its head, the research topic, and
       its tail, the current step), down to a quarter of the budget.

    Then, as last resorts for requests that still do not fit (a huge reporter input): the other
    middle messages are cut to a stub and then dropped, the newest messages cut to a stub and the
    task cut to a stub. If the system prompt and tool schemas alone exceed the budget, the result
    is as small as this function can make it and the provider will decide.

    ``weights`` are the model's (``script_weights_for``). A request that fits is returned
    unchanged. Nothing is mutated; trimmed messages are copies.
    """
    if not messages:
        return []
    fixed = REQUEST_OVERHEAD + MESSAGE_OVERHEAD + count_tokens(system_prompt, weights) + tools_tokens
    allowed = limit - reserve_for_output
    state = _Conversation.of(messages, fixed, allowed, weights)
    if state.overflow <= 0:
        return list(messages)
    _trim(state, messages, budget=max(0, allowed - fixed))
    return [message for message in state.messages if message is not None]


def _trim(state: _Conversation, messages: list[ChatMessage], budget: int) -> None:
    """Trim ``state`` in :func:`fit_to_budget`'s order until it fits (or nothing is left to trim).

    ``budget`` is what the messages may take once the system prompt, the tool schemas and the
    output reserve are paid for; the excerpt floor of a tool output scales with it.
    """
    units = _units(messages)
    task = next((index for index, message in enumerate(messages) if message.role == "user"), None)
    last_unit = units[-1]
    middle = [unit for unit in units if unit is not last_unit and task not in unit]
    middle_tool_turns = [unit for unit in middle
                         if len(unit) > 1 or messages[unit[0]].role == "tool" or messages[unit[0]].tool_calls]
    tool_floor = min(TOOL_EXCERPT_MAX, max(TOOL_EXCERPT_MIN, budget // 16))

    # 1. tool outputs, oldest first, to the excerpt floor.
    for index in [i for i, message in enumerate(messages) if message.role == "tool"]:
        state.shrink(index, tool_floor)
    # 2. drop middle tool-call turns, oldest first.
    for unit in middle_tool_turns:
        if state.overflow <= 0:
            break
        state.drop(unit)
    # 3. the task's middle; then the last resorts.
    if task is not None:
        state.shrink(task, max(LAST_RESORT_TOKENS, budget // 4))
    for index in [i for unit in middle for i in unit]:
        state.shrink(index, LAST_RESORT_TOKENS)
    for unit in middle:
        if state.overflow <= 0:
            break
        state.drop(unit)
    for index in last_unit:
        state.shrink(index, LAST_RESORT_TOKENS)
    if task is not None:
        state.shrink(task, LAST_RESORT_TOKENS)
