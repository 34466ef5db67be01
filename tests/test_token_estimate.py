"""The offline token estimate against a real tokenizer's counts (tests/fixtures/token_counts.json).

The context budget trims every request to the model's window with an offline estimate; if it ran
low, the provider would reject the request (HTTP 400) and the step would fail. The fixture holds
the counts real tokenizers give for English, Chinese, Japanese, Korean and Russian prose, symbols
and emoji, code, our own prompts and the tool preamble the researcher, coder and coordinator send.
The estimate must not be below any tokenizer's count, and not far above the most expensive one.

By default the estimate follows the most expensive tokenizer: SmolLM2's, trained mostly on English,
spends three times as many tokens on Chinese as Qwen2's. Model families known to have a large CJK
vocabulary (Qwen, DeepSeek, GPT-4o...) get lighter CJK weights, held here against Qwen2's counts:
never below them, and not so far above that Chinese research is trimmed for nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from activities.model.context_budget import (
    ENGLISH_CENTRIC,
    LARGE_CJK_VOCABULARY,
    TOOL_PREAMBLE_OVERHEAD,
    ScriptWeights,
    count_tokens,
    count_tool_tokens,
    script_weights_for,
)

FIXTURE = Path(__file__).parent / "fixtures" / "token_counts.json"
ENTRIES: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["texts"]
KINDS = {"prose", "code", "prompt", "tools"}
# Above this times the most expensive tokenizer's count, the estimate would trim much text that fits.
MAX_RATIO = 1.6


THRIFTY = "Qwen2"  # the fixture's tokenizer with a large CJK vocabulary
MAX_CJK_RATIO = 1.7  # the light weights stay a margin above Qwen2's counts, 0.66-1.08 a character


def estimate(entry: dict[str, Any], weights: ScriptWeights = ENGLISH_CENTRIC) -> int:
    """What the product estimates for the fixture's text: tool entries through their schemas."""
    if entry["kind"] == "tools":
        return count_tool_tokens(entry["tools"], weights)
    return count_tokens(entry["text"], weights)


def test_fixture_covers_the_texts_the_estimate_ran_low_on() -> None:
    names = {entry["name"] for entry in ENTRIES}
    assert {"chinese_prose", "japanese_prose", "korean_prose", "tools_researcher", "tools_coder"} <= names
    assert all(entry["counts"] and min(entry["counts"].values()) > 0 and entry["kind"] in KINDS for entry in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["name"] for entry in ENTRIES])
def test_estimate_errs_high_but_not_absurdly(entry: dict[str, Any]) -> None:
    estimated = estimate(entry)
    counts = entry["counts"]
    assert all(estimated >= count for count in counts.values()), f"{entry['name']}: {estimated} < {counts}"
    assert estimated <= MAX_RATIO * max(counts.values()), f"{entry['name']}: {estimated} vs {counts}"


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["name"] for entry in ENTRIES])
def test_thrifty_families_estimate_above_their_tokenizer_and_close_on_cjk(entry: dict[str, Any]) -> None:
    estimated, count = estimate(entry, LARGE_CJK_VOCABULARY), entry["counts"][THRIFTY]
    assert count <= estimated, f"{entry['name']}: {estimated} < {count}"
    if estimate(entry) != estimated:  # the text has CJK, which the weights govern
        assert estimated <= MAX_CJK_RATIO * count, f"{entry['name']}: {estimated} vs {count}"


@pytest.mark.parametrize(("model", "weights"), [
    ("gpt-4o-mini", LARGE_CJK_VOCABULARY), ("Qwen/Qwen2.5-72B-Instruct", LARGE_CJK_VOCABULARY),
    ("deepseek-chat", LARGE_CJK_VOCABULARY), ("doubao-seed-1.6", LARGE_CJK_VOCABULARY),
    ("/models/qwen2.5-7b-instruct-q4_k_m.gguf", LARGE_CJK_VOCABULARY), ("o3-mini", LARGE_CJK_VOCABULARY),
    ("gpt-4-turbo", ENGLISH_CENTRIC), ("llama-3.1-8b", ENGLISH_CENTRIC), ("mistral-large", ENGLISH_CENTRIC),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", ENGLISH_CENTRIC), ("deerflow-offline", ENGLISH_CENTRIC),
    ("my-model", ENGLISH_CENTRIC),
])
def test_only_known_thrifty_families_get_the_light_weights(model: str, weights: ScriptWeights) -> None:
    assert script_weights_for(model) == weights


def test_tool_preamble_is_paid_once_and_only_with_tools() -> None:
    tool = next(entry for entry in ENTRIES if entry["name"] == "tools_coder")["tools"][0]
    assert count_tool_tokens([]) == 0
    assert count_tool_tokens([tool, tool]) - count_tool_tokens([tool]) < TOOL_PREAMBLE_OVERHEAD


def test_digits_count_one_token_each() -> None:
    # Qwen, DeepSeek and SmolLM2 split numbers into single digits: a table of figures costs that much.
    assert count_tokens("8000 15000 2024") >= 13
