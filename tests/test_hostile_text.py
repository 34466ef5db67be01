"""Every parser of untrusted text ends in bounded time on pathological input (issue #42 §1), and each
one rewritten for that reads what the pattern it replaced read.

Bounded time: each handler of tests/support/hostile_text.py (request bodies, model replies, pages,
search results, documents, whatever the CLI prints) is fed every shape (a run of each unit that made
a pattern of ours or DeerFlow's quadratic, brackets nested 100,000 deep, lone surrogates, mixed line
ends) at 200,000 characters, and hypothesis composes more (a prefix, a unit repeated, a suffix, of
any characters including lone surrogates and every line end). The budget is CPU time, so a loaded
machine does not count, and generous: linear handlers take at most a fifth of a second here (at
most 1 s per MB: bench/hostile_text.py), while the old patterns took minutes on such text.

Equivalence: hypothesis writes short texts of the characters that matter to each rewrite and
compares it with the old pattern (a scanner that reads something else would be a silent change).
"""

from __future__ import annotations

import html
import json
import re
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from activities.documents import extract
from activities.web import decode
from activities.web.search_providers._http import plain_text
from server.content import without_highlight
from tests.support.hostile_text import HANDLERS, UNITS, shapes
from workflows.contracts.podcast import without_markup
from workflows.research.plan_parsing import without_fences
from workflows.text.markdown_links import links
from workflows.text.reply_json import fenced
from workflows.text.untrusted_text import without_lone_surrogates

pytestmark = pytest.mark.timeout(600)

SIZE = 200_000
BUDGET = 3.0  # CPU seconds for one call on SIZE characters
SHAPES = shapes(SIZE)
# Every character class a parser might treat apart, lone surrogates and every line end included.
ANY_CHARACTER = st.characters(categories=("Lu", "Ll", "Lo", "Nd", "Zs", "Zl", "Zp", "Cc", "Cs", "Po", "Ps", "Pe",
                                          "Sm", "Sk", "So"))
PIECE = st.one_of(st.sampled_from(UNITS), st.text(ANY_CHARACTER, min_size=1, max_size=6))
BOUNDED = settings(max_examples=12, deadline=None, database=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EQUIVALENT = settings(max_examples=400, deadline=None, database=None, derandomize=True)


def cpu_seconds(handler: object, text: str) -> float:
    start = time.process_time()
    handler(text)  # type: ignore[operator]
    return time.process_time() - start


@pytest.mark.parametrize("name", list(HANDLERS))
def test_every_shape_is_handled_within_the_budget(name: str) -> None:
    slow = {shape: round(seconds, 2) for shape, text in SHAPES.items()
            if (seconds := cpu_seconds(HANDLERS[name], text)) > BUDGET}
    assert slow == {}, f"{name} took over {BUDGET} s of CPU on {SIZE:,} characters of"


@pytest.mark.parametrize("name", list(HANDLERS))
@BOUNDED
@given(prefix=st.text(ANY_CHARACTER, max_size=40), unit=PIECE, suffix=st.text(ANY_CHARACTER, max_size=40),
       repeats=st.integers(1, 40_000))
def test_a_repeated_piece_between_any_text_is_handled_within_the_budget(
        name: str, prefix: str, unit: str, suffix: str, repeats: int) -> None:
    text = prefix + (unit * repeats)[:SIZE] + suffix
    assert cpu_seconds(HANDLERS[name], text) <= BUDGET


# ---------------------------------------------------------------- model replies shaped like what a flow asked for

# A flow's keys among others, so hypothesis reaches the parsers' checks of each field's type.
KEYS = st.sampled_from(["title", "slides", "bullets", "lines", "speaker", "paragraph", "scores", "overall_score",
                        "strengths", "weaknesses", "steps", "step_type", "locale", "thought", "action", "arguments",
                        "has_enough_context", "need_search", "description", "x"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(ANY_CHARACTER, max_size=12))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner,
                                                                                                max_size=6),
                           max_leaves=24)
# The model replies' parsers, and the API server's request bodies (JSON too, from anybody).
JSON_PARSERS = ("reply_json", "slide_deck", "podcast_script", "judgement", "plan", "json_tool_action", "request_body")


@pytest.mark.parametrize("name", JSON_PARSERS)
@settings(max_examples=150, deadline=None, database=None, derandomize=True)
@given(value=JSON_VALUES, fence=st.booleans(), depth=st.sampled_from([0, 40, 3000]))
@example(value={"title": "Tides \ud800", "lines": ["\udfff"], "action": "x\ud800"}, fence=False, depth=0)
def test_any_json_a_model_sends_is_read_or_refused_as_documented(name: str, value: object, fence: bool,
                                                                depth: int) -> None:
    """Every field of the wrong type, a lone surrogate's escape, nesting past each bound: the parser
    returns, or raises the one error its flow answers (a re-ask, a 502, DeerFlow's parsing failure)."""
    text = "[" * depth + json.dumps(value, allow_nan=True) + "]" * depth
    HANDLERS[name](f"```json\n{text}\n```" if fence else text)


# ---------------------------------------------------------------- rewrites read what their patterns read


def texts(*pieces: str) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(pieces), max_size=24).map("".join)


@EQUIVALENT
@given(texts("<", "</", "mark", "MARK", "marks", ">", " ", "a", "\n", "=x"))
def test_the_highlight_goes_as_the_old_pattern_took_it(text: str) -> None:
    assert without_highlight(text) == re.sub(r"</?mark\b[^>]*>", "", text, flags=re.IGNORECASE)


@EQUIVALENT
@given(texts("title:", "title: ", " ", "\t", '"', "'", "a", "b", "\n", "#"))
def test_the_front_matter_title_is_the_old_patterns(front: str) -> None:
    old = re.search(r"^title:[ \t]*[\"']?(.+?)[\"']?[ \t]*$", front, re.MULTILINE)
    assert extract.front_matter_title(front) == (old.group(1) if old else None)


@EQUIVALENT
@given(texts("#", "# ", "   ", " ", "\t", "a", "b", "\n", "####### "))
def test_a_heading_is_the_old_patterns(text: str) -> None:
    old = re.search(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", text, re.MULTILINE)
    new = extract._HEADING.search(text)
    assert (new.group(1) if new else None) == (old.group(1) if old else None)


OLD_META = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([a-z0-9_:.\-]+)", re.IGNORECASE)
OLD_XML = re.compile(rb"<\?xml[^>]*encoding\s*=\s*[\"']([a-z0-9_:.\-]+)", re.IGNORECASE)


@EQUIVALENT
@given(texts("<meta", "<META ", "<?xml", " ", "charset", "encoding", "=", '"', "'", "utf-8", ">", "x", "<"))
def test_a_declared_charset_is_the_old_patterns(text: str) -> None:
    body = text.encode()
    old = OLD_META.search(body) or OLD_XML.search(body)
    assert decode._declared_in_document(body) == (old.group(1).decode("ascii") if old else None)


@EQUIVALENT
@given(texts("<", ">", "<b>", "a", " ", "&amp;", "\n"))
def test_a_snippet_loses_its_tags_as_the_old_pattern_took_them(value: str) -> None:
    assert plain_text(value) == " ".join(html.unescape(re.sub(r"<[^>]+>", "", value)).split())


@EQUIVALENT
@given(texts("```", "json", " ", "\n", "a", "{", "}", "`"))
def test_a_fenced_block_is_the_old_patterns(reply: str) -> None:
    old = re.search(r"```(?:json)?\s*(.*?)```", reply, re.DOTALL)
    assert fenced(reply) == (old.group(1) if old else None)


@EQUIVALENT
@given(texts("```", "json", "py", " ", "\n", "a", "{", "`"))
def test_a_plan_loses_its_fences_as_the_old_pattern_took_them(text: str) -> None:
    assert without_fences(text) == re.sub(r"^\s*```[a-zA-Z]*\s*|\s*```\s*$", "", text.strip())


@EQUIVALENT
@given(texts("[", "]", "(", ")", "![", "](", "a", "*", "_", "`", "#", ">", " ", "\n"))
def test_markup_goes_as_the_old_pattern_took_it(text: str) -> None:
    old = re.sub(r"[*_`#>]+|!?\[([^\]]*)\]\([^)]*\)", lambda match: match.group(1) or "", text)
    assert without_markup(text) == old


@EQUIVALENT
@given(texts("[", "]", "(", ")", "![", "](", "http://", "https://", "a", " ", "\n", "\\"))
def test_citations_and_images_are_counted_as_deerflow_counts_them(text: str) -> None:
    assert sum(1 for _ in links(text, "[", "web")) == len(re.findall(r"\[[^\]]*\]\(https?://[^\s\)]+\)", text))
    assert sum(1 for _ in links(text, "![", "nonempty")) == len(re.findall(r"!\[[^\]]*\]\([^)]+\)", text))


@EQUIVALENT
@given(texts("a", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00", "\U0001f600"))
def test_lone_surrogates_are_replaced_as_utf_16_decoding_replaces_them(text: str) -> None:
    assert without_lone_surrogates(text) == text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
