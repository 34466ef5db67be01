"""A step's finding preview shows its findings, not the step restated (workflows/research/findings.py)."""

from __future__ import annotations

from workflows.research.findings import FINDING_PREVIEW_CHARS, finding_preview

RESTATED = "## Problem Statement\n\n" + "The step, restated at length. " * 12 + "\n\n"


def test_the_preview_starts_after_the_restated_problem() -> None:
    finding = RESTATED + "## Findings\n\n- Tidal turbines produce 6 MW [EMEC](https://e.org).\n\n## Conclusion\nok"
    assert finding_preview(finding).startswith("## Findings\n\n- Tidal turbines produce 6 MW")


def test_a_finding_without_a_restated_problem_is_previewed_from_its_start() -> None:
    assert finding_preview("- one\n- two") == "- one\n- two"
    assert finding_preview("## 问题陈述\n\n重述。\n\n## 发现\n\n- 一") == "## 发现\n\n- 一"
    assert len(finding_preview("x" * 5000)) == FINDING_PREVIEW_CHARS
    assert finding_preview(RESTATED) == RESTATED[:FINDING_PREVIEW_CHARS]  # nothing after it: as it is
