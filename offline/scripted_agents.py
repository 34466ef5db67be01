"""Deterministic stand-ins for DeerFlow's agents, as pure functions over a chat request.

The offline model server (``offline.model_server``) hands every ``/v1/chat/completions`` body
to :func:`respond`. Which agent is being played is read from what the request offers (see
:func:`detect_agent`), never from a marker that would ship to real providers too; everything else
comes from the message list, so the same request always yields the same reply. Nothing here
does I/O: the answers are built only from what the workflow sent (topic, search results, tool
output, observations), which is what makes an offline run a real, inspectable end-to-end run
rather than canned text.

The agents live by kind: ``offline.planning_agents`` (coordinator, planner), ``offline.step_agents``
(researcher, coder, analyst) and, here, the reporter and the prompt enhancer; what they share
(messages, sections, sentences) is ``offline.agent_text``.
"""

# Chinese text needs full-width punctuation, which RUF001 would flag on every zh-CN string.

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from offline import content_agents
from offline.agent_text import (
    LINK_RE,
    ScriptedReply,
    any_section,
    first_sentence,
    key_point,
    locale_of,
    offered_tools,
    plain,
    section,
    shorten,
    system_text,
    text_of,
    tool_outputs,
    user_messages,
    zh_wanted,
)
from offline.plan_edits import PLAN_NOTE_OPENINGS
from offline.planning_agents import coordinator, planner
from offline.report_styles import ReportParts, render_report
from offline.step_agents import analyst, coder, researcher

# Tools that only one agent is offered. MCP tools may be offered beside them, so one match decides.
AGENT_TOOLS = (
    ("coordinator", frozenset({"handoff_to_planner", "ask_clarification"})),
    ("coder", frozenset({"python_repl_tool"})),
    ("researcher", frozenset({"web_search", "crawl_tool", "local_search_tool"})),
)
# Turns without tools (the analyst, the reporter, any agent's final summarising turn) are told
# apart by the role their prompt opens with.
ROLE_RE = re.compile(r"^You are an? (researcher|coder|analyst|reporter|prompt enhancer|report judge|prose writer"
                     r"|presentation composer|podcast script writer)\b", re.MULTILINE)
STYLE_RE = re.compile(r"Report style:\s*([A-Za-z_]+)")
URL_RE = re.compile(r"(?:https?|file|document)://[^\s)\]>\"']+")
OBSERVATION_PREFIX = "Below are some observations for the research task:"


def detect_agent(body: dict[str, Any]) -> str | None:
    """The DeerFlow agent a chat request is for, from what it offers; None for a plain chat.

    An agent's own tools name it, JSON mode is the planner's, and a tool-less turn falls back to
    the role its prompt states ("You are a reporter."), which every real prompt has anyway.
    """
    offered = set(offered_tools(body))
    for agent, tools in AGENT_TOOLS:
        if offered & tools:
            return agent
    if (body.get("response_format") or {}).get("type") in ("json_object", "json_schema"):
        return "planner"
    match = ROLE_RE.search(system_text(body.get("messages") or []))
    return match.group(1).replace(" ", "_") if match else None


# ---------------------------------------------------------------- reporter


def _observation_title(observation: str, index: int, zh: bool) -> str:
    """A subsection heading for an observation: its step title if it has one."""
    problem = any_section(observation, "problem")
    match = re.match(r"\*\*(.+?)\*\*", problem)
    if match:
        return match.group(1).strip()
    heading = re.search(r"(?m)^#{1,3} (.+)$", observation)
    return heading.group(1).strip() if heading else (f"观察 {index}" if zh else f"Observation {index}")


def without_plan_notes(thought: str) -> str:
    """The planner's thought up to its notes to the reviewer (the background search, the edit it
    followed, the step limit, which come last): what the research is about belongs in a report's
    overview, those do not."""
    found = [at for opening in PLAN_NOTE_OPENINGS if (at := thought.find(opening)) >= 0]
    return thought[:min(found)].strip() if found else thought


def reporter(body: dict[str, Any]) -> ScriptedReply:
    """DeerFlow's report in the requested style; every observation is reproduced so no finding is lost."""
    messages = body.get("messages") or []
    users = [text_of(m.get("content")) for m in user_messages(messages)]
    request = users[0] if users else ""
    title = section(request, "Task", "##") or first_sentence(request) or "Research Report"
    observations = [u[len(OBSERVATION_PREFIX):].strip() for u in users if u.startswith(OBSERVATION_PREFIX)]
    observations += [text_of(m.get("content")).strip() for m in user_messages(messages)
                     if m.get("name") == "observation" and not text_of(m.get("content")).startswith(
                         OBSERVATION_PREFIX)]
    zh = zh_wanted(locale_of(messages, title))
    style_match = STYLE_RE.search(system_text(messages))
    links: dict[str, str] = {}
    for observation in observations:
        for text, url in LINK_RE.findall(observation):
            links.setdefault(url, text)
    points = [key_point(o) or shorten(plain(o), 200) for o in observations]
    parts = ReportParts(
        title=title, thought=without_plan_notes(section(request, "Description", "##")),
        points=list(dict.fromkeys(p for p in points if p)),
        sections=[(_observation_title(o, i, zh), re.sub(r"(?m)^(#{1,4}) ", r"\1## ", o))
                  for i, o in enumerate(observations, 1)],
        rows=[(p, len(set(URL_RE.findall(o)))) for o, p in zip(observations, points, strict=True)],
        links=links, zh=zh,
    )
    return ScriptedReply(content=render_report(style_match.group(1).lower() if style_match else "academic", parts))


# ---------------------------------------------------------------- dispatch


# What each report style's enhanced prompt asks for (the enhancer's prompt names the style).
ENHANCER_FOCUS = {
    "academic": "a rigorous, well-cited analysis of the evidence, its methods and its limits",
    "popular_science": "a clear explanation for curious non-specialists, with concrete examples",
    "news": "the latest developments, who is involved and why they matter now",
    "social_media": "a short, engaging summary of the key facts people should know",
    "strategic_investment": "the market, the main players, growth drivers, risks and the outlook",
}


def prompt_enhancer(body: dict[str, Any]) -> ScriptedReply:
    """DeerFlow's prompt enhancer: the original prompt, made specific, in the tags it asks for."""
    messages = body.get("messages") or []
    style = STYLE_RE.search(system_text(messages))
    user = text_of(user_messages(messages)[-1].get("content")) if user_messages(messages) else ""
    original, _, context = user.removeprefix("Original prompt:").partition("Additional context:")
    topic = " ".join(original.split()).rstrip("?.! ") or "the topic"
    focus = ENHANCER_FOCUS.get(style.group(1) if style else "", ENHANCER_FOCUS["academic"])
    extra = f" Take into account: {shorten(' '.join(context.split()), 300)}." if context.strip() else ""
    text = (f"Research {topic}. Cover the background, the current state and the main open questions, "
            f"compare the leading approaches or positions with evidence from reliable sources, and "
            f"give {focus}.{extra}")
    return ScriptedReply(content=f"<enhanced_prompt>\n{text}\n</enhanced_prompt>")


def plain_chat(body: dict[str, Any]) -> ScriptedReply:
    """No DeerFlow agent recognised: a short, honest answer (summarising tool output if there is any)."""
    messages = body.get("messages") or []
    outputs = tool_outputs(messages)
    users = [text_of(m.get("content")) for m in user_messages(messages)]
    if outputs:
        text = "Summary of the tool results so far:\n\n" + "\n".join(
            f"- {first_sentence(o) or shorten(o, 200)}" for o in outputs)
    else:
        asked = shorten(users[-1], 200) if users else ""
        text = ("This is DeerFlow's offline demo model; it can only play DeerFlow's agents. "
                f'You said: "{asked}"')
    return ScriptedReply(content=text)


def _content(body: dict[str, Any], agent: Callable[[str, str], str]) -> ScriptedReply:
    """A content flow's agent (offline/content_agents.py): system text and the last user message in, text out."""
    messages = body.get("messages") or []
    users = user_messages(messages)
    return ScriptedReply(content=agent(system_text(messages), text_of(users[-1].get("content")) if users else ""))


AGENTS: dict[str, Callable[[dict[str, Any]], ScriptedReply]] = {
    "coordinator": coordinator, "planner": planner, "researcher": researcher, "coder": coder,
    "analyst": analyst, "reporter": reporter, "prompt_enhancer": prompt_enhancer,
    "report_judge": lambda body: _content(body, content_agents.report_judge),
    "prose_writer": lambda body: _content(body, content_agents.prose_writer),
    "presentation_composer": lambda body: _content(body, content_agents.ppt_composer),
    "podcast_script_writer": lambda body: _content(body, content_agents.podcast_script_writer),
}


def respond(body: dict[str, Any], agent: str | None = None) -> ScriptedReply:
    """The scripted reply to one chat-completions request body, by ``agent`` if given (else detected)."""
    agent = agent or detect_agent(body)
    reply = AGENTS.get(agent or "", plain_chat)(body)
    return ScriptedReply(content=reply.content, tool_calls=reply.tool_calls, agent=agent)
