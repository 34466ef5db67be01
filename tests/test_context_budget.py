"""The context budget: token estimate, context windows, trimming, and the ``chat`` activity using them.

The acceptance test is a researcher step that has crawled ten long pages: through the real
``chat`` activity and the fake model server, the request the provider receives must fit the
model's window, keep the OpenAI tool-call ordering valid, and still carry the task and the newest
page.
"""

from __future__ import annotations

import functools
import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from activities.model.context_budget import (
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    count_message_tokens,
    count_request_tokens,
    count_tokens,
    count_tool_tokens,
    excerpt,
    fit_to_budget,
    output_reserve,
    token_limit_for,
)
from activities.model.llm import ModelActivities
from activities.model.prompts import render_prompt
from config.deerflow import conf_values
from config.settings import Settings
from offline.model_server import FakeModelServer
from tests.support.settings import settings_with
from workflows.contracts.chat import ChatMessage, ChatRequest, ToolCall
from workflows.research.tools import TOOLS

MARKER = "characters trimmed to fit the context window"
WORDS = ("tide", "moon", "ocean", "gravity", "coast", "water", "level", "cycle", "spring", "neap", "basin",
         "current", "harbour", "energy", "measurement", "station", "record", "height", "flood", "ebb", "estuary",
         "shelf", "resonance", "amplitude", "phase")
TASK = ("# Research Topic\n\nHow do tides work?\n\n# Current Step\n\n## Title\n\nTidal mechanics\n\n"
        "## Description\n\nRead the ten best pages on tidal mechanics.\n\n## Locale\n\nen-US")
RESEARCHER_VARS = {"CURRENT_TIME": "now", "locale": "en-US", "tool_guidance": "-"}


@functools.cache
def page(number: int, chars: int = 60_000) -> str:
    """A deterministic crawled page of English prose: recognisable head and tail, ``chars`` long."""
    rng = random.Random(number)
    head = f"# Page {number}\n\nSource: https://pages.example/{number}\n\n"
    tail = f"\n\nEND OF PAGE {number}."
    sentences: list[str] = []
    size = len(head) + len(tail)
    while size < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + ". "
        sentences.append(sentence)
        size += len(sentence)
    return (head + "".join(sentences))[: chars - len(tail)] + tail


def crawl_conversation(pages: int, chars: int = 60_000, parallel: int = 1) -> list[ChatMessage]:
    """Task, then ``pages`` turns of ``parallel`` crawl_tool calls, each answered by a long page."""
    messages = [ChatMessage(role="user", content=TASK)]
    number = 0
    for turn in range(pages):
        ids = [f"call_{turn}_{i}" for i in range(parallel)]
        calls = [ToolCall(id=cid, name="crawl_tool", arguments={"url": f"https://pages.example/{number + i}"})
                 for i, cid in enumerate(ids)]
        messages.append(ChatMessage(role="assistant", tool_calls=calls))
        for i, cid in enumerate(ids):
            messages.append(ChatMessage(role="tool", tool_call_id=cid, name="crawl_tool",
                                        content=page(number + i, chars)))
        number += parallel
    return messages


def assert_tool_pairing(messages: list[ChatMessage]) -> None:
    """OpenAI's rule: each tool message follows (through tool messages only) the assistant message
    that called it, and every call of an assistant message is answered before the next message."""
    pending: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "tool":
            assert message.tool_call_id in pending, f"message {index} answers no open tool call"
            pending.discard(message.tool_call_id)
            continue
        assert not pending, f"message {index} comes before tool calls {sorted(pending)} were answered"
        if message.role == "assistant":
            pending = {call.id for call in message.tool_calls}
    assert not pending, f"tool calls {sorted(pending)} were never answered"


def from_body(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    """The provider's view of the messages, back as ChatMessages (to count and validate them)."""
    return [
        ChatMessage(
            role=m["role"], content=m.get("content") or "", name=m.get("name"), tool_call_id=m.get("tool_call_id"),
            tool_calls=[ToolCall(id=c["id"], name=c["function"]["name"],
                                 arguments=json.loads(c["function"]["arguments"]))
                        for c in m.get("tool_calls") or []],
        )
        for m in messages
    ]


def wire(messages: list[ChatMessage]) -> list[tuple[Any, ...]]:
    """What of a message reaches the provider (langchain does not send a tool message's name)."""
    return [(m.role, m.content, m.tool_call_id, [c.model_dump() for c in m.tool_calls]) for m in messages]


def body_tokens(body: dict[str, Any]) -> int:
    """Estimated prompt tokens of what the provider received: every message plus the tool schemas."""
    return (REQUEST_OVERHEAD + sum(count_message_tokens(m) for m in from_body(body["messages"]))
            + count_tool_tokens(body.get("tools") or []))


# ---------------------------------------------------------------- count_tokens


def test_count_tokens_weighs_cjk_heavier_than_ascii() -> None:
    english = "The tide rises twice a day because the moon pulls the ocean."
    chinese = "潮汐每天涨落两次，因为月球的引力牵引着海洋。"
    assert count_tokens(chinese) / len(chinese) > count_tokens(english) / len(english)
    assert count_tokens("潮" * 100) >= 100  # at least one token per Han character
    assert count_tokens("") == 0
    assert count_tokens("a") == 1


@pytest.mark.parametrize("seed", range(5))
def test_count_tokens_is_never_under_a_quarter_of_the_characters(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t.,;:!?-_/(){}[]\"'#*=+<>|"
    samples = [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3000))),
        " ".join(rng.choice(WORDS) for _ in range(500)),
        "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(300)),
        "Привет, мир! Ça va? 😀🌊 " * 20,
        page(seed, 5000),
    ]
    for text in samples:
        assert count_tokens(text) >= -(-len(text) // 4), text[:60]


def test_count_tokens_estimates_english_prose_conservatively() -> None:
    # cl100k counts 10 tokens for this sentence; the estimate must not be lower, nor absurdly higher.
    assert 10 <= count_tokens("The quick brown fox jumps over the lazy dog.") <= 15
    prose = page(1, 20_000)
    assert len(prose) / 4.6 <= count_tokens(prose) <= len(prose) / 2.5


def test_message_tokens_include_overhead_and_tool_calls() -> None:
    plain = ChatMessage(role="assistant", content="hello")
    calling = ChatMessage(role="assistant", content="hello",
                          tool_calls=[ToolCall(id="call_1", name="crawl_tool", arguments={"url": "https://x.example"})])
    assert count_message_tokens(plain) == MESSAGE_OVERHEAD + count_tokens("hello")
    assert count_message_tokens(calling) > count_message_tokens(plain) + count_tokens("https://x.example")


# ---------------------------------------------------------------- token_limit_for


@pytest.mark.parametrize(("model", "window"), [
    ("deerflow-offline-demo", 32_000),
    ("gpt-4o-mini", 128_000),
    ("gpt-4.1", 1_000_000),
    ("o3-mini", 200_000),
    ("openai/o4-mini", 200_000),
    ("gpt-3.5-turbo", 16_000),
    ("claude-3-7-sonnet-latest", 200_000),
    ("deepseek-chat", 64_000),
    ("deepseek-ai/DeepSeek-V3.1", 128_000),
    ("qwen-max", 32_000),
    ("qwen-plus-latest", 128_000),
    ("doubao-1.5-pro-32k-250115", 32_000),
    ("doubao-1.5-pro-256k", 256_000),
    ("doubao-seed-1-6-250615", 128_000),
    ("meta-llama/Meta-Llama-3-8B-Instruct", 8_000),
    ("llama-3.3-70b-versatile", 128_000),
    ("gemini-2.5-flash", 1_000_000),
    ("moonshot-v1-8k", 8_000),
    ("some-local-model", 32_000),
    ("", 32_000),
])
def test_token_limit_is_inferred_from_the_model_name(model: str, window: int) -> None:
    assert token_limit_for(model, None) == window


def test_a_configured_token_limit_wins() -> None:
    assert token_limit_for("gpt-4o", 8000) == 8000
    assert token_limit_for("some-local-model", 200_000) == 200_000
    assert token_limit_for("gpt-4o", 0) == 128_000  # not a usable limit: inferred instead


def test_token_limit_setting_from_env_and_conf_yaml(tmp_path: Path) -> None:
    conf = tmp_path / "conf.yaml"
    conf.write_text("BASIC_MODEL:\n  model: qwen-max\n  token_limit: 24000\n", encoding="utf-8")
    assert conf_values(conf, {})["TOKEN_LIMIT"] == 24000
    assert Settings(**conf_values(conf, {})).token_limit == 24000
    assert Settings(TOKEN_LIMIT="9000").token_limit == 9000
    assert Settings().token_limit is None
    assert Settings(TOKEN_LIMIT="lots").token_limit is None  # a typo falls back to inference
    assert Settings(TOKEN_LIMIT="-5").token_limit is None


# ---------------------------------------------------------------- excerpt and fit_to_budget


def test_excerpt_keeps_head_and_tail_around_a_marker() -> None:
    text = page(3, 30_000)
    cut = excerpt(text, 500)
    assert count_tokens(cut) <= 500
    assert cut.startswith("# Page 3\n\nSource: https://pages.example/3") and cut.endswith("END OF PAGE 3.")
    head, rest = cut.split("\n\n[… ", 1)
    trimmed, tail = rest.split(f" {MARKER} …]\n\n", 1)
    assert text == head + text[len(head):len(head) + int(trimmed.replace(",", ""))] + tail  # counts what it cut
    assert len(head) > len(tail)  # the head gets the larger share
    assert excerpt("short", 500) == "short"


def test_fit_to_budget_leaves_a_fitting_request_unchanged() -> None:
    messages = crawl_conversation(3, chars=2000)
    assert fit_to_budget("system", messages, 100, 128_000, 8192) == messages
    # ... and the same conversation is trimmed when the window is small.
    assert fit_to_budget("system", messages, 100, 1500, 300) != messages


@pytest.mark.parametrize("limit", [1_500, 2_500, 4_000, 8_000, 16_000, 40_000])
@pytest.mark.parametrize("parallel", [1, 3])
def test_fit_to_budget_fits_and_keeps_task_last_message_and_pairing(limit: int, parallel: int) -> None:
    system = "You are a researcher. " * 20
    messages = crawl_conversation(10, chars=20_000, parallel=parallel)
    reserve = output_reserve(limit)
    fitted = fit_to_budget(system, messages, 120, limit, reserve)
    assert count_request_tokens(system, messages, 120) > limit  # the test needs trimming
    assert count_request_tokens(system, fitted, 120) <= limit - reserve
    assert fitted[0] == messages[0]  # the task, intact
    assert_tool_pairing(fitted)
    assert fitted[-1].tool_call_id == messages[-1].tool_call_id
    assert fitted[-1].content.startswith(f"# Page {10 * parallel - 1}\n")
    # Dropped turns are the oldest ones: what is left is a suffix of the original turns.
    kept_ids = [m.tool_call_id for m in fitted if m.role == "tool"]
    all_ids = [m.tool_call_id for m in messages if m.role == "tool"]
    assert kept_ids == all_ids[len(all_ids) - len(kept_ids):]


def test_fit_to_budget_trims_tool_output_before_dropping_messages() -> None:
    messages = crawl_conversation(10, chars=20_000)
    system, tools = "system prompt", 120
    # Room for ten excerpts: nothing is dropped, the old pages are cut, oldest first.
    fitted = fit_to_budget(system, messages, tools, 12_000, 1_000)
    assert len(fitted) == len(messages)
    assert [m.role for m in fitted] == [m.role for m in messages]
    tools_fitted = [m for m in fitted if m.role == "tool"]
    assert all(MARKER in m.content for m in tools_fitted[:5])
    lengths = [len(m.content) for m in tools_fitted]
    assert lengths[0] <= lengths[-1]  # the oldest page is cut at least as much as the newest
    # Too little room for ten excerpts: turns are dropped, but only once every older page is cut.
    fitted = fit_to_budget(system, messages, tools, 2_000, 400)
    assert len(fitted) < len(messages)
    assert all(MARKER in m.content for m in fitted if m.role == "tool")
    assert_tool_pairing(fitted)


def test_fit_to_budget_never_leaves_a_call_without_its_results() -> None:
    messages = crawl_conversation(6, chars=10_000, parallel=3)
    # An assistant answer in the middle, a final-answer request at the end: all shapes of a loop.
    messages.insert(1 + 4 * 3, ChatMessage(role="assistant", content="Interim notes. " * 50))
    messages.append(ChatMessage(role="user", content="Write your final answer now."))
    for limit in range(800, 20_000, 1_300):
        fitted = fit_to_budget("system", messages, 0, limit, limit // 4)
        assert count_request_tokens("system", fitted, 0) <= limit - limit // 4
        assert_tool_pairing(fitted)
        assert fitted[0] == messages[0] and fitted[-1] == messages[-1]


def test_fit_to_budget_cuts_the_task_middle_only_as_a_last_resort() -> None:
    findings = "".join(f"## Completed Step {i}\n\n<finding>\n{page(100 + i, 8_000)}\n</finding>\n\n" for i in range(5))
    task = f"# Research Topic\n\nTides\n\n# Completed Steps\n\n{findings}# Current Step\n\n## Title\n\nTidal power"
    messages = [ChatMessage(role="user", content=task), *crawl_conversation(4, chars=8_000)[1:]]
    roomy = fit_to_budget("system", messages, 0, 40_000, 2_000)
    assert roomy[0].content == task  # pages were cut instead
    tight = fit_to_budget("system", messages, 0, 6_000, 1_000)
    assert count_request_tokens("system", tight, 0) <= 5_000
    head, tail = tight[0].content.split(MARKER)
    assert head.startswith("# Research Topic\n\nTides") and tail.endswith("## Title\n\nTidal power")
    assert len(tight) == 3  # the task and the newest crawl turn
    assert_tool_pairing(tight)


def test_fit_to_budget_is_deterministic_and_pure() -> None:
    messages = crawl_conversation(8, chars=12_000, parallel=2)
    snapshot = [m.model_copy(deep=True) for m in messages]
    first = fit_to_budget("system", messages, 50, 5_000, 1_000)
    second = fit_to_budget("system", messages, 50, 5_000, 1_000)
    assert first == second and first != messages
    assert messages == snapshot  # the input was not modified


# ---------------------------------------------------------------- through the chat activity


@pytest.fixture
def token_limit(provider_env: dict[str, str]) -> Settings:
    """The fakes' worker settings with TOKEN_LIMIT=8000."""
    return settings_with(provider_env, TOKEN_LIMIT="8000")


async def test_a_researcher_that_crawled_ten_large_pages_never_exceeds_the_limit(
    model_server: FakeModelServer, token_limit: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    messages = crawl_conversation(10, chars=60_000)
    request = ChatRequest(prompt="researcher", prompt_vars=RESEARCHER_VARS, messages=messages,
                          tools=[TOOLS["web_search"].spec, TOOLS["crawl_tool"].spec])
    with caplog.at_level(logging.INFO):
        response = await ActivityEnvironment().run(ModelActivities(token_limit).chat, request)
    assert response.message.content
    body = model_server.requests_for("researcher")[-1]
    sent = from_body(body["messages"])
    assert body_tokens(body) <= 8000
    assert body_tokens(body) <= 8000 - output_reserve(8000)  # and room is left for the answer
    assert sent[0].role == "system" and sent[0].content == render_prompt("researcher", RESEARCHER_VARS)
    assert sent[1].role == "user" and sent[1].content == TASK
    assert_tool_pairing(sent[1:])
    assert sent[-1].role == "tool" and sent[-1].tool_call_id == "call_9_0"
    assert sent[-1].content.startswith("# Page 9\n") and sent[-1].content.endswith("END OF PAGE 9.")
    assert any("Trimmed the researcher prompt" in record.getMessage() for record in caplog.records)


async def test_a_request_that_fits_reaches_the_provider_unchanged(
    model_server: FakeModelServer, token_limit: Settings
) -> None:
    messages = crawl_conversation(2, chars=1_000)
    request = ChatRequest(prompt="researcher", prompt_vars=RESEARCHER_VARS, messages=messages,
                          tools=[TOOLS["crawl_tool"].spec])
    await ActivityEnvironment().run(ModelActivities(token_limit).chat, request)
    assert wire(from_body(model_server.requests_for("researcher")[-1]["messages"])[1:]) == wire(messages)
    # The same conversation with longer pages no longer fits in 8000 tokens, and is trimmed.
    longer = request.model_copy(update={"messages": crawl_conversation(2, chars=30_000)})
    await ActivityEnvironment().run(ModelActivities(token_limit).chat, longer)
    sent = from_body(model_server.requests_for("researcher")[-1]["messages"])[1:]
    assert sent != longer.messages and MARKER in sent[2].content


@pytest.mark.parametrize(("model", "trimmed"), [("qwen-plus", False), ("my-model", True)])
async def test_chinese_pages_are_budgeted_by_the_models_tokenizer_family(
    model_server: FakeModelServer, provider_env: dict[str, str], model: str, trimmed: bool
) -> None:
    """3,000 Chinese characters are about 2,000 tokens to Qwen's tokenizer, 5,600 to an
    English-centric one: within an 8,000-token window only the unknown model's copy is cut."""
    chinese_page = "固态电池用固体电解质取代液态电解质，能量密度更高，也更安全。" * 100
    messages = [ChatMessage(role="user", content=TASK),
                ChatMessage(role="assistant",
                            tool_calls=[ToolCall(id="c1", name="crawl_tool", arguments={"url": "u"})]),
                ChatMessage(role="tool", tool_call_id="c1", name="crawl_tool", content=chinese_page)]
    request = ChatRequest(prompt="researcher", prompt_vars=RESEARCHER_VARS, messages=messages,
                          tools=[TOOLS["crawl_tool"].spec])
    settings = settings_with(provider_env, TOKEN_LIMIT="8000", BASIC_MODEL=model)
    await ActivityEnvironment().run(ModelActivities(settings).chat, request)
    sent = from_body(model_server.requests_for("researcher")[-1]["messages"])
    assert (MARKER in sent[-1].content) is trimmed
