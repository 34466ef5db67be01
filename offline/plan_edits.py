"""A reviewer's plan edits, as the offline planner applies them.

Each request ("add a step on running costs") becomes a step focused on what it asks for, never the
request's wording pasted as a title. The plan stays within ``max_step_num``: when a requested step
does not fit, a planned step makes room for it (or, past that, the request is left out), and the
plan's thought says so, so no reviewer finds a step silently gone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from offline.agent_text import mid_sentence

# An edit request's wording around what it asks for: "add a step on running costs" -> "running costs".
FOCUS_RE = re.compile(
    r"^(?:please\s+)?(?:(?:also\s+)?(?:add|include|cover|insert)\s+(?:(?:a|an|another|one|new)\s+)?"
    r"(?:(?:research\s+)?(?:step|section|part)s?\s+)?(?:on|about|covering|for|regarding|into|that covers)?\s*|"
    r"(?:research|look\s+(?:at|into)|investigate|focus\s+on)\s+)(?:the\s+)?",
    re.IGNORECASE,
)
ZH_FOCUS_RE = re.compile(r"^(?:请)?(?:再)?(?:增加|添加|加上?|补充)(?:一个|一步)?(?:关于)?|(?:的)?(?:步骤|部分|研究)$")
# Where one edit asks for a second step: "... waste storage and another on costs", "...; add ...".
MORE_RE = re.compile(
    r"\s*(?:[;\n]|,?\s+(?:and|plus)\s+(?:also\s+)?(?:another|one more|a second)(?:\s+(?:step|section|part))?"
    r"\s+(?:on|about|covering|for|regarding|into)\s+)\s*",
    re.IGNORECASE,
)
ZH_MORE_RE = re.compile(r"\s*(?:[；;\n]|[，,]?(?:再|并|另外)(?=增加|添加|加|补充))\s*")


def focuses(feedback: list[str], zh: bool) -> list[str]:
    """Every edit's requests, in order, each as a step's angle ("Running costs"); a request made
    again in a later edit counts once."""
    found: dict[str, str] = {}
    for text in feedback:
        for part in (ZH_MORE_RE if zh else MORE_RE).split(text):
            focus = _focus(part, zh)
            if focus:
                found.setdefault(focus.lower(), focus)
    return list(found.values())


def _focus(request: str, zh: bool) -> str:
    """What one request asks to research: its wording ("add a step on") dropped, kept whole."""
    text = re.sub(r"\s+", " ", request).strip().rstrip(".!?。！？")
    focus = (ZH_FOCUS_RE.sub("", text) if zh else FOCUS_RE.sub("", text, count=1)).strip() or text
    return focus[:1].upper() + focus[1:]


@dataclass
class Revision:
    """The revised plan's research steps, and what the step limit cost the edit."""

    steps: list[dict[str, Any]]
    replaced: list[str] = field(default_factory=list)  # planned steps' angles a request pushed out
    left_out: list[str] = field(default_factory=list)  # requests that did not fit at all


def revise(planned: list[dict[str, Any]], requested: list[dict[str, Any]], slots: int) -> Revision:
    """Requested steps go after the planned ones they leave room for: a request outranks a planned
    step (the reviewer asked for it), the latest requests outrank earlier ones, and the planned
    steps that make room are the last ones (the first, the background, is the last to go)."""
    kept_requests = requested[-slots:] if slots else []
    room = slots - len(kept_requests)
    return Revision(steps=[*planned[:room], *kept_requests],
                    replaced=[angle_of(step) for step in planned[room:]],
                    left_out=[angle_of(step) for step in requested[:len(requested) - len(kept_requests)]])


def angle_of(step: dict[str, Any]) -> str:
    """A step's angle: its title before the subject ("Running costs" of "Running costs: ...")."""
    return re.split(r": |：", str(step["title"]), maxsplit=1)[0]


# Where a person sets the step limit: the page's field, the CLI's flag, DeerFlow's setting.
STEP_LIMIT = "Max steps on the page, --max-steps in the CLI, \"Max steps of a research plan\" in DeerFlow's settings"
STEP_LIMIT_ZH = "页面上的 Max steps，命令行的 --max-steps，DeerFlow 设置中的最大步骤数"
# How the planner's own notes in a thought begin (the revision, the limit, the background
# investigation): words for the reviewer, which the reporter leaves out of the report.
PLAN_NOTE_OPENINGS = ("Revised the plan", "The plan may have at most", "The background investigation found",
                      "根据审阅意见修订了计划", "计划最多只能有", "背景调查找到了")


def limit_note(revision: Revision, max_steps: int, zh: bool) -> str:
    """The thought's sentence on what the step limit cost the edit; empty when it cost nothing."""
    if not (revision.replaced or revision.left_out):
        return ""
    quoted = ("、".join(f"“{a}”" for a in revision.replaced) if zh else
              ", ".join(f'"{mid_sentence(a)}"' for a in revision.replaced))
    left = ("、".join(f"“{a}”" for a in revision.left_out) if zh else
            ", ".join(f'"{mid_sentence(a)}"' for a in revision.left_out))
    if zh:
        note = f"计划最多只能有 {max_steps} 个步骤（{STEP_LIMIT_ZH}）"
        note += f"，因此新增的步骤替换了{quoted}" if revision.replaced else ""
        note += f"，关于{left}的要求放不下，未列入计划" if revision.left_out else ""
        return note + "；如需全部保留，请增加最大步骤数。"
    parts = []
    if revision.replaced:
        many = len(revision.replaced) > 1
        parts.append(f"the planned step{'s' if many else ''} on {quoted} {'were' if many else 'was'} "
                     "dropped to make room for the request")
    if revision.left_out:
        parts.append(f"the request for {left} did not fit and is left out")
    return (f" The plan may have at most {max_steps} steps ({STEP_LIMIT}), so " + " and ".join(parts)
            + "; allow more steps to keep them all.")
