"""No regular expression of ours takes super-linear time on untrusted text (issue #42 §1).

Every pattern the product compiles is found in its source (tests/support/regex_inventory.py) and
checked twice: by regexploit, which finds nested and overlapping repeats (cubic and exponential
time), and by tests/support/redos.py, which finds the two quadratic shapes this project had (a
"<mark " x 60,000 prompt held the API server for 10-30 s; "[" x 120,000 a worker for minutes).

A pattern the quadratic check flags but that is linear for a reason it cannot see is listed below
with that reason; a pattern the inventory cannot read (built at run time) is listed with what it
can be, or why the text it reads is trusted. A new pattern is neither, so it is checked or fails.
"""

from __future__ import annotations

import re
import warnings

import pytest

with warnings.catch_warnings():  # regexploit imports sre_parse and sre_constants, deprecated since 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from regexploit.ast.sre import SreOpParser
    from regexploit.redos import find

from tests.support.redos import findings
from tests.support.regex_inventory import FoundPattern, product_patterns
from workflows.contracts.report_metrics import SECTION_PATTERNS

# Flagged by the quadratic check, linear for the reason given (pattern text -> reason).
LINEAR_FOR_A_REASON = {
    r"<enhanced_prompt>(.*?)(?:</enhanced_prompt>|$)":
        "an attempt that starts always matches (the $ alternative, DOTALL), so there is one",
    r"\b[a-zA-Z]+\b": "an attempt from inside a word fails at its first \\b; one from a word's start matches",
    r"^ {0,3}#{1,6}[ \t]+(.*[^ \t#\n]|.)[ \t#]*$":
        "anchored at each line; the marks' blanks then '.' (one character) match when '.*' finds no last "
        "character, so each line is one attempt of one backtracking pass (measured: bench/hostile_text.py)",
    r"^#\s+.+": "a line the blanks cross into starts with '#', which '.+' then matches: a failed attempt crossed none",
    "<meta[^>]*?charset\\s*=\\s*(?:[\\\"']\\s*)?([a-z0-9_:.\\-]+)":
        "matched only at a '<meta' after the '>' that closed the last one tried (decode._first_in_tag)",
    "<\\?xml[^>]*encoding\\s*=\\s*[\\\"']([a-z0-9_:.\\-]+)":
        "matched only at a '<?xml' after the '>' that closed the last one tried (decode._first_in_tag)",
    r"<[^>]+>": "applied only up to the text's last '>': an attempt from every '<' there ends at a '>' and matches",
    "OSC, DCS, SOS, PM, APC": "a string sequence's body stops at any opener, so failed attempts never overlap",
    # config/env_file.py's reader matches each of its patterns only where it stands (_Reader._read).
    r"[^\S\r\n]*(?:\r\n|\n|\r|$)": "matched once, at the end of a .env statement (config/env_file.py)",
    r"'((?:\\.|[^'\\])*)'": "matched once, where a .env value opens a quote; one that fails has no closing "
                             "quote after it, so no later value opens one (config/env_file.py)",
    r'"((?:\\.|[^"\\])*)"': "matched once, where a .env value opens a quote; one that fails has no closing "
                             "quote after it, so no later value opens one (config/env_file.py)",
}
# Built at run time, so the inventory cannot read them: (path, start of the call) -> what they can be,
# or None when the text they read is trusted (the operator's configuration).
BUILT_AT_RUN_TIME: dict[tuple[str, str], tuple[tuple[str | bytes, int], ...] | None] = {
    ("workflows/contracts/report_metrics.py", "re.search(pattern, report"): (
        (SECTION_PATTERNS["title"], re.MULTILINE),),
    ("workflows/contracts/report_metrics.py", "re.search(pattern, lower"): tuple(
        (pattern, re.IGNORECASE | re.MULTILINE) for section, pattern in SECTION_PATTERNS.items() if section != "title"),
    ("runtime/run_names.py", "re.sub('[^a-z0-9]+' if ascii_only"): (("[^a-z0-9]+", 0), (r"[\W_]+", 0)),
    # The operator's secrets, escaped, as one alternation of literals (or one literal): no repeat at all.
    ("activities/guards/secret_scrubber.py", "re.compile('|'.join(map(re.escape, values)))"): None,
    ("config/secrets.py", "re.compile(re.escape(value)"): None,
    # Model names from the operator's configuration.
    ("activities/model/context_budget.py", "re.compile(pattern)"): None,
}
PATTERNS = product_patterns()


def _built(found: FoundPattern) -> tuple[tuple[str | bytes, int], ...] | None:
    path = found.where.rsplit(":", 1)[0]
    for (where, start), patterns in BUILT_AT_RUN_TIME.items():
        if path == where and found.source.startswith(start):
            return patterns
    raise AssertionError(f"{found.where}: a pattern built at run time ({found.source}); list it in BUILT_AT_RUN_TIME")


def _checked() -> list[tuple[str, str | bytes, int, bool]]:
    """(where, pattern, flags, only matched at one position) for every pattern that reads any text."""
    checked = []
    for found in PATTERNS:
        if found.pattern is not None:
            checked.append((found.where, found.pattern, found.flags, found.anchored_call))
        else:
            checked += [(found.where, pattern, flags, False) for pattern, flags in _built(found) or ()]
    return checked


def _reason(pattern: str | bytes) -> str | None:
    text = pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
    return next((reason for known, reason in LINEAR_FOR_A_REASON.items() if known == text or known in text), None)


def _regexploit(pattern: str | bytes, flags: int) -> list[str]:
    """regexploit's findings; it cannot read an atomic group, which is read as a plain group (that
    backtracks more, so no finding there means none in the pattern)."""
    text = (pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern).replace("(?>", "(?:")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [f"starriness {redos.starriness} from {redos.example_prefix!r}"
                for redos in find(SreOpParser().parse_sre(text, flags))]


def test_the_inventory_finds_the_patterns_we_know() -> None:
    wheres = {found.where.rsplit(":", 1)[0] for found in PATTERNS}
    assert {"server/content.py", "workflows/contracts/enhance.py", "activities/web/decode.py", "cli/terminal.py",
            "workflows/contracts/report_metrics.py", "activities/documents/extract.py"} <= wheres
    assert len(PATTERNS) > 50


def test_every_pattern_built_at_run_time_is_listed() -> None:
    unread = [found for found in PATTERNS if found.pattern is None]
    assert {(_built(found) is None) for found in unread} == {True, False}  # each listed, trusted or checked
    listed = {(where, start) for where, start in BUILT_AT_RUN_TIME}
    used = {(where, start) for where, start in listed for found in unread
            if found.where.startswith(where + ":") and found.source.startswith(start)}
    assert used == listed, f"listed but no longer in the code: {listed - used}"


@pytest.mark.parametrize(("where", "pattern", "flags", "anchored"), _checked(), ids=lambda value: str(value)[:40])
def test_regexploit_finds_no_redos(where: str, pattern: str | bytes, flags: int, anchored: bool) -> None:
    assert _regexploit(pattern, flags) == [], f"{where}: {pattern!r}"


@pytest.mark.parametrize(("where", "pattern", "flags", "anchored"), _checked(), ids=lambda value: str(value)[:40])
def test_no_pattern_has_a_quadratic_shape(where: str, pattern: str | bytes, flags: int, anchored: bool) -> None:
    found = findings(pattern, flags, anchored)
    assert not found or _reason(pattern), f"{where}: {pattern!r}: {found}"


def test_every_reason_still_belongs_to_a_flagged_pattern() -> None:
    flagged = {pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
               for _, pattern, flags, anchored in _checked() if findings(pattern, flags, anchored)}
    stale = [known for known in LINEAR_FOR_A_REASON if not any(known == text or known in text for text in flagged)]
    assert stale == []


# The patterns that were quadratic (or worse) on hostile text: each check must see its shape.
OLD_PATTERNS = {
    "prose highlight (server/content.py)": (r"</?mark\b[^>]*>", re.IGNORECASE, "restart"),
    "DeerFlow's citations (report metrics)": (r"\[[^\]]*\]\(https?://[^\s\)]+\)", 0, "restart"),
    "DeerFlow's images (report metrics)": (r"!\[[^\]]*\]\([^)]+\)", 0, "restart"),
    "document heading": (r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE, "overlap"),
    "front matter title": (r"^title:[ \t]*[\"']?(.+?)[\"']?[ \t]*$", re.MULTILINE, "overlap"),
    "meta charset": (rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([a-z0-9_:.\-]+)", re.IGNORECASE, "overlap"),
    "plan fence": (r"```(?:json)?\s*(.*?)\s*```", re.DOTALL, "overlap"),
    "OSC to BEL or ST (cli/terminal.py)": (r"[\x90\x9d][^\x07\x1b\x9c]*(?:\x07|\x9c)", 0, "restart"),
}


@pytest.mark.parametrize("name", list(OLD_PATTERNS))
def test_the_check_sees_the_shapes_that_were_slow(name: str) -> None:
    pattern, flags, shape = OLD_PATTERNS[name]
    assert shape in {finding.shape for finding in findings(pattern, flags)}


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(\w+\s?)*$", r"(?:\d+)*\d+x"])
def test_regexploit_sees_nested_repeats(pattern: str) -> None:
    assert _regexploit(pattern, 0)
