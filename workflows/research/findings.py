"""What a step's finding shows before it is opened: its findings, not the step restated.

DeerFlow's researcher opens every finding with ``## Problem Statement`` (the step in its own
words: prompts/researcher.md), so the first characters of a finding said what the reader already
knew, and were cut off before its findings.
"""

from __future__ import annotations

import re

FINDING_PREVIEW_CHARS = 300
# The restated problem's heading (the prompt's English, the offline model's Chinese), and the next heading.
_RESTATED = re.compile(r"^#{1,6}[ \t]*(?:Problem Statement|问题陈述)[ \t]*$", re.MULTILINE | re.IGNORECASE)
_HEADING = re.compile(r"^#{1,6}[ \t]", re.MULTILINE)


def finding_preview(finding: str) -> str:
    """The finding's first characters from the section after its restated problem (all of it when
    there is none); each search runs once over the text, in linear time."""
    restated = _RESTATED.search(finding)
    if restated is not None and (following := _HEADING.search(finding, restated.end())) is not None:
        finding = finding[following.start():]
    return finding[:FINDING_PREVIEW_CHARS]
