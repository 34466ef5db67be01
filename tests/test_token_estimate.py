"""The offline token estimate against a real tokenizer's counts (tests/fixtures/token_counts.json).

The context budget trims every request to the model's window with an offline estimate; if it ran
low, the provider would reject the request (HTTP 400) and the step would fail. The fixture holds
the counts real tokenizers give for English, Chinese, Japanese, Korean and Russian prose, symbols
and emoji, code, our own prompts and the tool preamble the researcher, coder and coordinator send.
The estimate must not be below any tokenizer's count, and not far above the most expensive one.

One estimate serves every provider, so it follows the most expensive tokenizer: SmolLM2's, trained
mostly on English, spends three times as many tokens on Chinese as Qwen2's, for which the estimate
leaves much of the window unused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from activities.context_budget import TOOL_PREAMBLE_OVERHEAD, count_tokens, count_tool_tokens

FIXTURE = Path(__file__).parent / "fixtures" / "token_counts.json"
ENTRIES: list[dict[str, Any]] = json.loads(FIXTURE.read_text(encoding="utf-8"))["texts"]
KINDS = {"prose", "code", "prompt", "tools"}
# Above this times the most expensive tokenizer's count, the estimate would trim much text that fits.
MAX_RATIO = 1.6


def estimate(entry: dict[str, Any]) -> int:
    """What the product estimates for the fixture's text: tool entries through their schemas."""
    return count_tool_tokens(entry["tools"]) if entry["kind"] == "tools" else count_tokens(entry["text"])


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


def test_tool_preamble_is_paid_once_and_only_with_tools() -> None:
    tool = next(entry for entry in ENTRIES if entry["name"] == "tools_coder")["tools"][0]
    assert count_tool_tokens([]) == 0
    assert count_tool_tokens([tool, tool]) - count_tool_tokens([tool]) < TOOL_PREAMBLE_OVERHEAD


def test_digits_count_one_token_each() -> None:
    # Qwen, DeepSeek and SmolLM2 split numbers into single digits: a table of figures costs that much.
    assert count_tokens("8000 15000 2024") >= 13
