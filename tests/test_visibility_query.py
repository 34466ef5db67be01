"""A person's visibility query is read and written back before it is ANDed with ours (runtime/
visibility_query.py), and research-run filters are built from typed fields (runtime/run_listing.py).

The attacks are the server dialect's own ways out of a parenthesis: a comment (``--`` comments out
the rest of the line, so ``x = 'a') OR (y = 'b') --`` pasted between parentheses closes ours and
comments out the ownership filter behind it), a quote escaped by a backslash, backticks, a second
statement. The live check that such a query cannot widen a scoped list runs against the dev server
in tests/test_bulk_decisions.py.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from pydantic import ValidationError

from runtime.run_listing import RunFilter, owner_scope, read_token
from runtime.run_memo import starter_keyword, starter_keywords
from runtime.visibility_query import MAX_COMPARISONS, MAX_DEPTH, QueryError, all_of, canonical_query
from workflows.contracts.decisions import Actor, Via
from workflows.contracts.status import Awaiting, Phase


@pytest.mark.parametrize(("typed", "written"), [
    ("DeerFlowPhase = 'awaiting_review'", "DeerFlowPhase = 'awaiting_review'"),
    ('WorkflowId = "it\'s"', "WorkflowId = 'it''s'"),
    ("WorkflowId = 'o''brien'", "WorkflowId = 'o''brien'"),
    ("a = 'x' and not (b <> 'y' or c is not null)", "a = 'x' AND NOT (b != 'y' OR c IS NOT NULL)"),
    ("StartTime between '2026-01-01' and '2026-02-01'", "StartTime BETWEEN '2026-01-01' AND '2026-02-01'"),
    ("WorkflowId not in ('a','b')", "WorkflowId NOT IN ('a', 'b')"),
    ("WorkflowId starts_with 'page-'", "WorkflowId STARTS_WITH 'page-'"),
    ("HistoryLength >= -3.5", "HistoryLength >= -3.5"),
])
def test_a_query_is_written_back_in_one_form(typed: str, written: str) -> None:
    assert canonical_query(typed) == written
    assert canonical_query(written) == written


@pytest.mark.parametrize("hostile", [
    "x = 'a') OR (y = 'b') --",  # closes our parenthesis, comments out the ownership filter
    "x = 'a' -- ) AND (DeerFlowStartedBy = 'api:bob'",
    "x = 'a' /* */",
    "x = 'a\\' OR y = 'b'",  # a backslash-escaped quote: the server's reading and ours would differ
    "`DeerFlowStartedBy` = 'x'",
    "x = 'a'; DELETE",
    "x = 'a' ORDER BY StartTime",
    "(x = 'a'",
    "x = 'a')",
    "x = y",
    "1 = 1",
    "x = 'a' OR",
    "",
    "   ",
    "x = 'unterminated",
])
def test_what_the_grammar_does_not_know_is_refused(hostile: str) -> None:
    with pytest.raises(QueryError):
        canonical_query(hostile)


def test_bounds_on_length_nesting_and_comparisons() -> None:
    with pytest.raises(QueryError, match="longer"):
        canonical_query("x = '" + "a" * 2_000 + "'")
    with pytest.raises(QueryError, match="nests"):
        canonical_query("(" * (MAX_DEPTH + 1) + "x = 'a'" + ")" * (MAX_DEPTH + 1))
    with pytest.raises(QueryError, match="comparisons"):
        canonical_query(" OR ".join(["x = 'a'"] * (MAX_COMPARISONS + 1)))
    assert canonical_query("(" * (MAX_DEPTH - 1) + "x = 'a'" + ")" * (MAX_DEPTH - 1))


def _outside_strings(query: str) -> str:
    """The query with every single-quoted literal (doubled quotes inside) blanked."""
    out, inside, index = [], False, 0
    while index < len(query):
        char = query[index]
        if char == "'":
            if inside and query[index + 1:index + 2] == "'":
                index += 2
                continue
            inside = not inside
        elif not inside:
            out.append(char)
        index += 1
    assert not inside, query
    return "".join(out)


HOSTILE = ["--", "/*", ";", "`", "\\", "#", ")", "(", '"', "''", " OR ", "\n", "x"]


def _value(rng: random.Random) -> str:
    """A quoted value holding the dialect's ways out (quotes doubled inside, as the grammar reads them)."""
    inner = "".join(rng.choice(HOSTILE) for _ in range(rng.randrange(4)))
    quote = rng.choice("'\"")
    return quote + inner.replace(quote, quote * 2).replace("\\", "") + quote


def _expression(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth < 4 and roll < 0.3:
        return f"{_expression(rng, depth + 1)} {rng.choice(['AND', 'OR', 'and'])} {_expression(rng, depth + 1)}"
    if depth < 4 and roll < 0.45:
        return f"{rng.choice(['', 'NOT '])}({_expression(rng, depth + 1)})"
    name = rng.choice(["WorkflowId", "DeerFlowStartedBy", "x"])
    return rng.choice([f"{name} {rng.choice(['=', '!=', '<>', '>='])} {_value(rng)}", f"{name} IS NOT NULL",
                       f"{name} IN ({_value(rng)}, {_value(rng)})", f"{name} STARTS_WITH {_value(rng)}"])


def _typed(rng: random.Random) -> str:
    """A query in the grammar, with hostile text in its values, and one time in three a hostile
    fragment spliced in somewhere (those must be refused or stay inside a value)."""
    text = _expression(rng)
    if rng.random() < 0.33:
        at = rng.randrange(len(text) + 1)
        text = text[:at] + rng.choice(HOSTILE) + text[at:]
    return text


@pytest.mark.parametrize("seed", range(8))
def test_whatever_is_typed_cannot_reach_past_its_parentheses(seed: int) -> None:
    """Accepted or refused; once accepted, ANDed between parentheses, its parentheses balance
    within them, and nothing outside its quoted values is a comment, a statement end or an escape."""
    rng = random.Random(seed)
    accepted = 0
    for typed in (_typed(rng) for _ in range(1_000)):
        try:
            written = canonical_query(typed)
        except QueryError:
            continue
        accepted += 1
        _contained(written)
    assert accepted > 500  # the fuzz reaches the writer, not only the refusals


def _contained(written: str) -> None:
    assert canonical_query(written) == written, written
    code = _outside_strings(all_of("WorkflowType = 'R'", written, "Owner = 'me'"))
    assert not any(mark in code for mark in ("--", "/*", ";", "`", "\\", "#", '"'))
    depth = 0
    for char in _outside_strings(written):
        depth += {"(": 1, ")": -1}.get(char, 0)
        assert depth >= 0  # it never closes a parenthesis it did not open: ours stay ours
    assert depth == 0


def test_a_filter_is_built_from_typed_fields() -> None:
    query = RunFilter(phase=Phase.AWAITING_REVIEW, started_by="alice", question="solid-state batteries!",
                      since=timedelta(days=7), query="WorkflowId STARTS_WITH 'page-'").visibility_query(
                          scope=owner_scope(Actor(name="alice", via=Via.API)))
    assert query.startswith("(WorkflowType = 'DeepResearchWorkflow') AND (ExecutionStatus = 'Running') AND "
                            "(DeerFlowPhase = 'awaiting_review') AND (DeerFlowStartedBy IN ('cli:alice', "
                            "'api:alice', 'temporal:alice')) AND (DeerFlowQuestion = 'solid') AND "
                            "(DeerFlowQuestion = 'state') AND (DeerFlowQuestion = 'batteries') AND (StartTime > '")
    assert query.endswith("Z') AND (WorkflowId STARTS_WITH 'page-') AND (DeerFlowStartedBy = 'api:alice' OR "
                          "DeerFlowStartedBy IS NULL)")
    assert "ExecutionStatus" in RunFilter(awaiting=Awaiting.PLAN_FEEDBACK).visibility_query()
    assert "ExecutionStatus" not in RunFilter(phase=Phase.COMPLETED).visibility_query()
    assert "DeerFlowQuestion" not in RunFilter(question="batteries").visibility_query(question_indexed=False)


def test_a_filter_refuses_what_it_cannot_use() -> None:
    for bad in ({"query": "x = 'a') OR (y = 'b') --"}, {"started_by": "eve\x1b[2J"}, {"since": "-PT1H"},
                {"phase": "paused"}, {"surprise": 1}, {"older_than": "P99999D"}):
        with pytest.raises(ValidationError):
            RunFilter.model_validate(bad)


def test_question_words_match_all_of_them_where_the_index_keeps_no_question() -> None:
    wanted = RunFilter(question="Solid-state BATTERIES")
    assert wanted.matches_question("Prospects of solid-state batteries for cars")
    assert not wanted.matches_question("Prospects of solid fuels")
    assert not wanted.matches_question(None)


def test_a_starter_is_indexed_without_quotes_or_backslashes() -> None:
    """The server matches no keyword holding a quote or a backslash by equality (checked on the
    dev server): such names are percent-encoded, so their holder still finds its runs."""
    assert starter_keyword(Actor(name="alice", via=Via.API)) == "api:alice"
    assert starter_keyword(Actor(name="o'brien \"x\" \\ 100%", via=Via.CLI)) == "cli:o%27brien %22x%22 %5C 100%25"
    assert starter_keywords("bob (api)") == ["api:bob"]
    assert starter_keywords("bob") == ["cli:bob", "api:bob", "temporal:bob"]


def test_a_page_token_is_what_the_list_handed_out() -> None:
    assert read_token(None) is None
    assert read_token("eyJhIjoxfQ==") == b'{"a":1}'
    for bad in ("not a token!", "a" * 3000):
        with pytest.raises(QueryError):
            read_token(bad)
